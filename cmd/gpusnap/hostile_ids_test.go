package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestCraftedIDsAreEscaped: a store anyone could have crafted may hold an id
// with terminal escape sequences; list and store check print it escaped.
func TestCraftedIDsAreEscaped(t *testing.T) {
	db, g, id := oneSnapshot(t)
	evil := "\x1b[2J\x1b]0;pwned\a" + id
	bdb, err := bolt.Open(db, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte("meta"))
		var m map[string]any
		if err := json.Unmarshal(meta.Get([]byte(id)), &m); err != nil {
			return err
		}
		m["id"] = evil
		v, _ := json.Marshal(m)
		return meta.Put([]byte(evil), v)
	})
	bdb.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"list"}, {"store", "check"}} {
		_, stdout, stderr := gpusnap(t, append(args, g...)...)
		if strings.ContainsAny(stdout+stderr, "\x1b\a") || !strings.Contains(stdout+stderr, id) {
			t.Errorf("%q printed %q %q", args, stdout, stderr)
		}
	}
}
