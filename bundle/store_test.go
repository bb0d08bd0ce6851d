package bundle

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
	"github.com/gpusnap/gpusnap/store/tlog"
)

// storeEvidenceOf stores in's snapshots in a new store and returns the
// log's evidence of them, the checkpoint signed with key (nil: unsigned).
// The snapshots are first made what a capture makes them: each byte that is
// not UTF-8 in a parsed field U+FFFD (a JSON round trip).
func storeEvidenceOf(t *testing.T, in *Input, key ed25519.PrivateKey) *StoreEvidence {
	t.Helper()
	for _, s := range []**snapshot.Snapshot{&in.Before, &in.After} {
		b, err := json.Marshal(*s)
		if err != nil {
			t.Fatal(err)
		}
		var back snapshot.Snapshot
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		*s = &back
	}
	st, err := store.Open(filepath.Join(t.TempDir(), "gpusnap.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Put(in.Before); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(in.After); err != nil {
		t.Fatal(err)
	}
	proofs, err := st.Inclusion(in.Before.ID, in.After.ID)
	if err != nil {
		t.Fatal(err)
	}
	note := append(tlog.CheckpointBody(proofs[0].Head), '\n')
	if key != nil {
		if note, err = tlog.SignCheckpoint(proofs[0].Head, key); err != nil {
			t.Fatal(err)
		}
	}
	return &StoreEvidence{Checkpoint: string(note), Inclusion: proofs}
}

// TestBundleProvesStoreInclusion: a bundle carries its snapshots' inclusion
// in the store's log; verify checks each proof at the checkpoint, and the
// checkpoint's signature with the bundle's key.
func TestBundleProvesStoreInclusion(t *testing.T) {
	in := testInput()
	in.SignKey = testKey()
	in.Store = storeEvidenceOf(t, &in, in.SignKey)
	rep := verifyBytes(t, writeBundle(t, in), nil)
	if !rep.Intact() || !rep.StoreProved || len(rep.Predicate.Store.Inclusion) != 2 {
		t.Fatalf("a bundle with the store's proofs: %+v %v", rep.Problems, rep.StoreProved)
	}

	// Unsigned, with a proof's hash flipped: named as such.
	un := testInput()
	un.Store = storeEvidenceOf(t, &un, nil)
	un.Store.Inclusion[1].Hashes[0] = bytes.Clone(un.Store.Inclusion[1].Hashes[0])
	un.Store.Inclusion[1].Hashes[0][3] ^= 1
	rep = verifyBytes(t, writeBundle(t, un), nil)
	if rep.Intact() || rep.StoreProved || !named(rep, "store inclusion") {
		t.Errorf("a broken proof: %+v", rep.Problems)
	}

	// A snapshot that is not the one its leaf recorded: FROM edited before
	// the bundle was written (the store's log still holds the original).
	ed := testInput()
	ed.Store = storeEvidenceOf(t, &ed, nil)
	ed.Before.Processes[0].Comm = "edited"
	rep = verifyBytes(t, writeBundle(t, ed), nil)
	if rep.Intact() || rep.StoreProved || !named(rep, "data/before.json") {
		t.Errorf("a snapshot not its leaf's: %+v", rep.Problems)
	}

	// Signed, with a checkpoint signed by another key.
	other := testInput()
	other.SignKey = testKey()
	other.Store = storeEvidenceOf(t, &other, ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, 32)))
	rep = verifyBytes(t, writeBundle(t, other), nil)
	if rep.Intact() || !named(rep, "store checkpoint") {
		t.Errorf("a checkpoint of another key: %+v", rep.Problems)
	}
}
