package bundle

import (
	"bytes"
	"crypto/ed25519"
	"path/filepath"
	"testing"

	"github.com/gpusnap/gpusnap/store"
)

// storeEvidenceOf stores in's snapshots in a new store and returns the
// log's evidence of them, the checkpoint signed with key (nil: unsigned).
func storeEvidenceOf(t *testing.T, in Input, key ed25519.PrivateKey) *StoreEvidence {
	t.Helper()
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
	note := append(store.CheckpointBody(proofs[0].Head), '\n')
	if key != nil {
		if note, err = store.SignCheckpoint(proofs[0].Head, key); err != nil {
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
	in.Store = storeEvidenceOf(t, in, in.SignKey)
	rep := verifyBytes(t, writeBundle(t, in), nil)
	if !rep.Intact() || !rep.StoreProved || len(rep.Predicate.Store.Inclusion) != 2 {
		t.Fatalf("a bundle with the store's proofs: %+v %v", rep.Problems, rep.StoreProved)
	}

	// Unsigned, with a proof's hash flipped: named as such.
	un := testInput()
	un.Store = storeEvidenceOf(t, un, nil)
	un.Store.Inclusion[1].Hashes[0] = bytes.Clone(un.Store.Inclusion[1].Hashes[0])
	un.Store.Inclusion[1].Hashes[0][3] ^= 1
	rep = verifyBytes(t, writeBundle(t, un), nil)
	if rep.Intact() || rep.StoreProved || !named(rep, "store inclusion") {
		t.Errorf("a broken proof: %+v", rep.Problems)
	}

	// Signed, with a checkpoint signed by another key.
	other := testInput()
	other.SignKey = testKey()
	other.Store = storeEvidenceOf(t, other, ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, 32)))
	rep = verifyBytes(t, writeBundle(t, other), nil)
	if rep.Intact() || !named(rep, "store checkpoint") {
		t.Errorf("a checkpoint of another key: %+v", rep.Problems)
	}
}
