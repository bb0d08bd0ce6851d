package store

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store/tlog"
)

// schema1Copy copies testdata/schema1/store.bolt, written by the last gpusnap
// of schema 1 (testdata/schema1/make.sh), into a temporary directory.
func schema1Copy(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/schema1/store.bolt")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "gpusnap.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// schema1Checkpoint is the checkpoint the old gpusnap signed of the store.
func schema1Checkpoint(t *testing.T) *tlog.TreeHead {
	t.Helper()
	text, err := os.ReadFile("testdata/schema1/checkpoint.txt")
	if err != nil {
		t.Fatal(err)
	}
	pemText, err := os.ReadFile("testdata/schema1/checkpoint.pub")
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemText)
	if block == nil {
		t.Fatal("checkpoint.pub is not PEM")
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	head, verified, err := tlog.ParseCheckpoint(text, pub.(ed25519.PublicKey))
	if err != nil || !verified {
		t.Fatalf("checkpoint: verified %v, %v", verified, err)
	}
	return &head
}

// forms counts the stored process records by form.
func forms(t *testing.T, s *Store) map[byte]int {
	t.Helper()
	out := map[byte]int{}
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketProcs).ForEach(func(_, v []byte) error { out[v[32]]++; return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// allJSON is GetJSON of every stored snapshot, by id.
func allJSON(t *testing.T, s *Store) map[string][]byte {
	t.Helper()
	metas, err := s.List(Filter{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, m := range metas {
		if out[m.ID], err = compactJSON(s, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// wantSameJSON checks that every snapshot of before shows the same now.
func wantSameJSON(t *testing.T, s *Store, before map[string][]byte) {
	t.Helper()
	for id, want := range before {
		got, err := compactJSON(s, id)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("snapshot %s: JSON changed across the upgrade (%v)", id, err)
		}
	}
}

// wantVerified checks the store against its log and the old checkpoint.
func wantVerified(t *testing.T, s *Store, cp *tlog.TreeHead, size uint64) {
	t.Helper()
	rep := mustVerify(t, s, cp)
	if len(rep.Problems) > 0 || rep.Head.Size != size {
		t.Fatalf("verify: %d leaves, problems %+v", rep.Head.Size, rep.Problems)
	}
	if r, err := s.Check(); err != nil || len(r.Problems) > 0 {
		t.Fatalf("check: %v %q", err, r.Problems)
	}
}

// TestSchema1Store: a store of schema 1 reads as it is, read-only without a
// byte changed; a write marks it schema 2, and a snapshot of the same
// processes rewrites the records it shares in binary. Through all of it every
// snapshot shows the JSON it showed before, byte for byte, and the log
// verifies, consistent with the checkpoint signed before the upgrade: its
// leaves are over the records' JSON, which no codec changes.
func TestSchema1Store(t *testing.T) {
	path, cp := schema1Copy(t), schema1Checkpoint(t)
	orig, _ := os.ReadFile(path)

	ro, err := Open(path, Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	before := allJSON(t, ro)
	if f := forms(t, ro); len(before) != 4 || f['{'] == 0 || f[compressedRecord] == 0 || f[formBinary]+f[formBinaryDeflate] > 0 {
		t.Fatalf("fixture: %d snapshots, record forms %v: want JSON records, plain and compressed", len(before), f)
	}
	wantVerified(t, ro, cp, cp.Size)
	_ = ro.Close()
	if now, _ := os.ReadFile(path); !bytes.Equal(now, orig) {
		t.Fatal("reading a schema 1 store changed it")
	}

	s := reopen(t, path)
	if s.schema != SchemaVersion {
		t.Fatalf("schema %d after a read-write open", s.schema)
	}
	wantSameJSON(t, s, before)
	wantVerified(t, s, cp, cp.Size)

	oldID := pickLabel(t, s, "again")
	again, err := s.Get(oldID)
	if err != nil {
		t.Fatal(err)
	}
	recordsBefore := forms(t, s)
	again.ID, again.Label = "20261201-235959.000000-000000", "after-upgrade"
	if err := s.Put(again); err != nil {
		t.Fatal(err)
	}
	after := forms(t, s)
	if after[formBinary] == 0 || after[formBinaryDeflate] == 0 {
		t.Errorf("record forms %v after a snapshot of the same processes: want its records rewritten in binary", after)
	}
	if total(after) != total(recordsBefore) {
		t.Errorf("%d records before, %d after: the snapshot should share them all", total(recordsBefore), total(after))
	}
	wantSameJSON(t, s, before)
	wantVerified(t, s, cp, cp.Size+1)
	if got, err := compactJSON(s, again.ID); err != nil || !bytes.Equal(got, jsonWithID(t, before[oldID], oldID, again)) {
		t.Errorf("the new snapshot's JSON is not the one it shares records with (%v)", err)
	}
}

func total(m map[byte]int) (n int) {
	for _, c := range m {
		n += c
	}
	return n
}

// pickLabel is the id of the one stored snapshot labelled label.
func pickLabel(t *testing.T, s *Store, label string) string {
	t.Helper()
	metas, err := s.List(Filter{Label: label})
	if err != nil || len(metas) != 1 {
		t.Fatalf("%d snapshots labelled %s (%v)", len(metas), label, err)
	}
	return metas[0].ID
}

// jsonWithID is a snapshot's JSON with another id and label.
func jsonWithID(t *testing.T, js []byte, old string, snap *snapshot.Snapshot) []byte {
	t.Helper()
	from := []byte(`"id":"` + old + `","label":"again"`)
	if !bytes.Contains(js, from) {
		t.Fatalf("no %s in the snapshot's JSON", from)
	}
	return bytes.Replace(js, from, []byte(`"id":"`+snap.ID+`","label":"`+snap.Label+`"`), 1)
}
