package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// schema1 is a store written by the last gpusnap of schema 1, with the
// checkpoint it signed and its public key (store/testdata/schema1/make.sh).
const schema1 = "../../store/testdata/schema1/"

// TestSchema1StoreUpgrade: a store of schema 1 verifies against its old
// checkpoint and shows what it showed; a snapshot stored into it upgrades it
// (schema 2, records rewritten in binary); after that it still verifies
// against the checkpoint signed before, every old snapshot shows byte for
// byte the same JSON, store check finds it sound, and diff reads the old
// snapshots. A binary record cut short is then one line and exit 2.
func TestSchema1StoreUpgrade(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	orig, err := os.ReadFile(schema1 + "store.bolt")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	verify := []string{"store", "verify", "--db", db, "--checkpoint", schema1 + "checkpoint.txt", "--pub", schema1 + "checkpoint.pub"}
	wantVerified := func(when string) {
		t.Helper()
		code, out, errs := gpusnap(t, verify...)
		if code != 0 || !strings.Contains(out, "signature verified") || !strings.Contains(out, "is consistent") {
			t.Fatalf("store verify %s: exit %d\n%s%s", when, code, out, errs)
		}
	}
	wantVerified("before the upgrade")
	ids := storedIDs(t, db)
	before := map[string]string{}
	for _, id := range ids {
		code, out, errs := gpusnap(t, "show", "--json", "--db", db, id)
		if code != 0 {
			t.Fatalf("show %s: %s", id, errs)
		}
		before[id] = out
	}
	if now, _ := os.ReadFile(db); !bytes.Equal(now, orig) {
		t.Fatal("reading the schema 1 store changed it")
	}

	if code, _, errs := gpusnap(t, "snapshot", "--db", db, "--proc-root", psFixture, "--no-nvml"); code != 0 {
		t.Fatalf("snapshot into the schema 1 store: %s", errs)
	}
	if schema, binary := storeForms(t, db); schema != "2" || binary == 0 {
		t.Fatalf("after a snapshot: schema %q, %d binary records", schema, binary)
	}
	wantVerified("after the upgrade")
	for _, id := range ids {
		if code, out, errs := gpusnap(t, "show", "--json", "--db", db, id); code != 0 || out != before[id] {
			t.Errorf("show --json %s after the upgrade: exit %d, same output %v %s", id, code, out == before[id], errs)
		}
	}
	if code, out, errs := gpusnap(t, "store", "check", "--db", db); code != 0 {
		t.Fatalf("store check: %d %s %s", code, out, errs)
	}
	if code, _, errs := gpusnap(t, "diff", "--db", db, ids[len(ids)-1], ids[0]); code != 0 && code != 1 {
		t.Fatalf("diff of two schema 1 snapshots: exit %d %s", code, errs)
	}

	cutBinaryRecord(t, db)
	code, out, errs := gpusnap(t, "show", "--json", "--db", db, storedIDs(t, db)[0])
	if code != exitError || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "is damaged: ") {
		t.Fatalf("a cut binary record: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// storedIDs lists the store's snapshot ids, newest first.
func storedIDs(t *testing.T, db string) []string {
	t.Helper()
	code, out, errs := gpusnap(t, "list", "--json", "--db", db)
	var metas []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(out), &metas); code != 0 || err != nil || len(metas) == 0 {
		t.Fatalf("list: %d %v %s", code, err, errs)
	}
	ids := make([]string, len(metas))
	for i, m := range metas {
		ids[i] = m.ID
	}
	return ids
}

// storeForms reads the schema version and counts binary process records
// (form 2 or 3 after the 32-byte hash) with bbolt itself.
func storeForms(t *testing.T, db string) (schema string, binary int) {
	t.Helper()
	b, err := bolt.Open(db, 0o600, &bolt.Options{ReadOnly: true, Timeout: 1e9})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_ = b.View(func(tx *bolt.Tx) error {
		schema = string(tx.Bucket([]byte("info")).Get([]byte("schema")))
		return tx.Bucket([]byte("procs")).ForEach(func(_, v []byte) error {
			if len(v) > 32 && (v[32] == 2 || v[32] == 3) {
				binary++
			}
			return nil
		})
	})
	return schema, binary
}

// cutBinaryRecord cuts every binary process record to half its length.
func cutBinaryRecord(t *testing.T, db string) {
	t.Helper()
	b, err := bolt.Open(db, 0o600, &bolt.Options{Timeout: 1e9})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	err = b.Update(func(tx *bolt.Tx) error {
		procs := tx.Bucket([]byte("procs"))
		cut := map[string][]byte{}
		_ = procs.ForEach(func(k, v []byte) error {
			if len(v) > 32 && v[32] == 2 {
				cut[string(k)] = bytes.Clone(v[:32+(len(v)-32)/2])
			}
			return nil
		})
		for k, v := range cut {
			if err := procs.Put([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
