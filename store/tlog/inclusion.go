package tlog

import (
	"fmt"

	"github.com/transparency-dev/merkle/proof"
)

// InclusionProof proves a snapshot's leaf is in the log at Head (RFC 6962).
type InclusionProof struct {
	Snapshot  string   `json:"snapshot"`
	LeafIndex uint64   `json:"leaf_index"`
	Leaf      string   `json:"leaf"` // the leaf's text
	Hashes    [][]byte `json:"hashes"`
	Head      TreeHead `json:"head"`
}

// Verify checks the proof against its head, and that its leaf stores its
// snapshot with digest (when digest is not empty).
func (p InclusionProof) Verify() error {
	l, err := ParseLeaf([]byte(p.Leaf))
	if err != nil {
		return err
	}
	if l.Index != p.LeafIndex || (l.Op != OpPut && l.Op != OpAdopt) || len(l.Snapshots) != 1 || l.Snapshots[0].ID != p.Snapshot {
		return fmt.Errorf("leaf %d does not store snapshot %s", p.LeafIndex, p.Snapshot)
	}
	if err := proof.VerifyInclusion(Hasher, p.LeafIndex, p.Head.Size, LeafHash([]byte(p.Leaf)), p.Hashes, p.Head.Root); err != nil {
		return fmt.Errorf("snapshot %s: leaf %d is not in the log of size %d: %w", p.Snapshot, p.LeafIndex, p.Head.Size, err)
	}
	return nil
}
