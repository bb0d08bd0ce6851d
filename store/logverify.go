package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	bolt "go.etcd.io/bbolt"

	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store/tlog"
)

// LogProblem is one thing the log and the store disagree on. Leaf is the
// leaf's index, -1 where no leaf is to blame, and Snapshot the id involved.
type LogProblem struct {
	Leaf     int64  `json:"leaf"`
	Snapshot string `json:"snapshot,omitempty"`
	Detail   string `json:"detail"`
}

// LogReport is what VerifyLog found.
type LogReport struct {
	Head      tlog.TreeHead `json:"head"` // recomputed from the leaves
	Snapshots int           `json:"snapshots"`
	Problems  []LogProblem  `json:"problems"`
	// Checkpoint is the earlier checkpoint proved against, when one was given.
	Checkpoint *tlog.TreeHead `json:"checkpoint,omitempty"`
	// Seals are the event log's seals the result leaves recorded, for the
	// caller to check against the event log (the store does not read it).
	Seals []LeafSeal `json:"-"`
}

// LeafSeal is one seal of the event log, and the leaf that recorded it.
type LeafSeal struct {
	Leaf uint64
	tlog.EventSeal
}

// live is a snapshot the log says is stored, with the leaf that stored it
// and the digest it recorded.
type live struct {
	leaf   uint64
	digest string
}

// logVerifier holds a verification's state inside its transaction.
type logVerifier struct {
	s      *Store
	tx     *bolt.Tx
	rep    *LogReport
	hashes [][]byte // leaf hashes, in order
	live   map[string]live
}

func (v *logVerifier) problem(leaf int64, id, format string, args ...any) {
	if len(v.rep.Problems) < maxProblems {
		v.rep.Problems = append(v.rep.Problems, LogProblem{Leaf: leaf, Snapshot: id, Detail: fmt.Sprintf(format, args...)})
	}
}

// VerifyLog recomputes the log's tree from its leaves and proves the store
// holds exactly the snapshots they say, with their digests, and a matching
// baseline index. With cp, the log must also extend that earlier checkpoint
// by an RFC 6962 consistency proof.
func (s *Store) VerifyLog(cp *tlog.TreeHead) (*LogReport, error) {
	rep := &LogReport{Problems: []LogProblem{}, Checkpoint: cp}
	err := s.view(func(tx *bolt.Tx) error {
		v := &logVerifier{s: s, tx: tx, rep: rep, live: map[string]live{}}
		if err := v.readLeaves(); err != nil {
			return err
		}
		v.checkStored()
		v.checkBaselines()
		if cp != nil {
			v.checkConsistency(*cp)
		}
		return nil
	})
	return rep, err
}

// readLeaves walks the log in order, replaying each leaf, and compares the
// tree its leaves make with the border the store kept.
func (v *logVerifier) readLeaves() error {
	info := v.tx.Bucket(bucketInfo)
	if info == nil {
		return v.s.damaged("bucket %s is missing", bucketInfo)
	}
	v.rep.Head.Origin = string(info.Get(keyLogOrigin))
	rng := rangeFactory.NewEmptyRange(0)
	if leaves := v.tx.Bucket(bucketLog); leaves != nil {
		err := leaves.ForEach(func(k, text []byte) error {
			v.readLeaf(k, text)
			h := tlog.LeafHash(text)
			v.hashes = append(v.hashes, h)
			return rng.Append(h, nil)
		})
		if err != nil {
			return err
		}
	}
	root, err := rng.GetRootHash(nil)
	if err != nil {
		return err
	}
	v.rep.Head.Size, v.rep.Head.Root = rng.End(), root
	if v.rep.Head.Origin == "" {
		v.rep.Head.Origin = tlog.Origin(hostID())
		if rng.End() > 0 {
			v.problem(-1, "", "the log has %d leaves but no origin", rng.End())
		}
		return nil
	}
	kept, err := decodeRange(info.Get(keyLogTree))
	switch {
	case err != nil:
		v.problem(-1, "", "the log's stored tree is unreadable: %v", err)
	case kept.End() != rng.End():
		v.problem(int64(min(kept.End(), rng.End())), "", "the log's stored tree has %d leaves, the log holds %d: leaves were deleted or added outside gpusnap", kept.End(), rng.End())
	case !kept.Equal(rng):
		v.problem(-1, "", "the log's leaves no longer hash to the tree the store kept: a leaf was changed outside gpusnap")
	}
	return nil
}

// readLeaf checks one leaf's key and text and replays it.
func (v *logVerifier) readLeaf(k, text []byte) {
	pos := uint64(len(v.hashes))
	if len(k) != 8 || binary.BigEndian.Uint64(k) != pos {
		v.problem(int64(pos), "", "leaf key %x where leaf %d belongs: a leaf was deleted or inserted", k, pos)
	}
	l, err := tlog.ParseLeaf(text)
	if err != nil {
		v.problem(int64(pos), "", "%v", err)
		return
	}
	first := ""
	if len(l.Snapshots) > 0 {
		first = l.Snapshots[0].ID
	}
	if l.Index != pos {
		v.problem(int64(pos), first, "leaf %d holds the %s written as leaf %d: the log was reordered", pos, l.Op, l.Index)
	}
	for _, ref := range l.Snapshots {
		v.replay(pos, l.Op, ref)
	}
	for _, e := range l.Events {
		v.rep.Seals = append(v.rep.Seals, LeafSeal{Leaf: pos, EventSeal: e})
	}
}

func (v *logVerifier) replay(pos uint64, op string, ref tlog.LeafSnapshot) {
	cur, stored := v.live[ref.ID]
	switch op {
	case tlog.OpPut, tlog.OpAdopt:
		if stored {
			v.problem(int64(pos), ref.ID, "stores snapshot %s again, already stored by leaf %d", ref.ID, cur.leaf)
		}
		v.live[ref.ID] = live{leaf: pos, digest: ref.Digest}
	case tlog.OpRemove, tlog.OpPrune:
		switch {
		case !stored:
			v.problem(int64(pos), ref.ID, "removes snapshot %s, which no earlier leaf stores", ref.ID)
		case cur.digest != ref.Digest:
			v.problem(int64(pos), ref.ID, "removes snapshot %s with digest %s, stored by leaf %d as %s", ref.ID, ref.Digest, cur.leaf, cur.digest)
		}
		delete(v.live, ref.ID)
	case tlog.OpResult:
	default:
		v.problem(int64(pos), ref.ID, "unknown operation %q", op)
	}
}

// checkStored compares the snapshots stored with those the log says are.
func (v *logVerifier) checkStored() {
	meta := v.tx.Bucket(bucketMeta)
	if meta == nil {
		v.problem(-1, "", "bucket %s is missing", bucketMeta)
		return
	}
	checked := map[uint64]bool{}
	_ = meta.ForEach(func(k, _ []byte) error {
		v.rep.Snapshots++
		id := string(k)
		l, ok := v.live[id]
		if !ok {
			v.problem(-1, id, "snapshot %s is stored, and no leaf stores it: added outside gpusnap", id)
			return nil
		}
		digest, err := v.s.storedDigest(v.tx, id, checked)
		switch {
		case err != nil:
			v.problem(int64(l.leaf), id, "snapshot %s (stored by leaf %d) was changed outside gpusnap: %v", id, l.leaf, causeOf(err))
		case digest != l.digest:
			v.problem(int64(l.leaf), id, "snapshot %s (stored by leaf %d) was changed outside gpusnap: its records' digest is %s, the leaf says %s", id, l.leaf, digest, l.digest)
		}
		return nil
	})
	for id, l := range v.live {
		if meta.Get([]byte(id)) == nil {
			v.problem(int64(l.leaf), id, "snapshot %s (stored by leaf %d) is gone, and no leaf removes it: deleted outside gpusnap", id, l.leaf)
		}
	}
}

// checkBaselines checks that the baseline index names exactly the stored
// baselines, since an entry deleted would make an older baseline the latest.
func (v *logVerifier) checkBaselines() {
	meta, idx := v.tx.Bucket(bucketMeta), v.tx.Bucket(bucketBaselines)
	if meta == nil || idx == nil {
		return
	}
	_ = meta.ForEach(func(k, mv []byte) error {
		var m Meta
		if json.Unmarshal(mv, &m) != nil || m.Label != snapshot.LabelBaseline || m.Tenant == "" {
			return nil // an unreadable entry is named by checkStored's digest
		}
		if idx.Get(baselineKey(m.Tenant, m.ID)) == nil {
			v.problem(int64(v.live[m.ID].leaf), m.ID, "baseline %s of tenant %q is missing from the baseline index: removed outside gpusnap", m.ID, m.Tenant)
		}
		return nil
	})
	_ = idx.ForEach(func(k, _ []byte) error {
		if i := bytes.IndexByte(k, 0); i >= 0 && meta.Get(k[i+1:]) == nil {
			v.problem(-1, string(k[i+1:]), "the baseline index names snapshot %s, which is not stored", k[i+1:])
		}
		return nil
	})
}

// checkConsistency proves the log extends the earlier checkpoint cp.
func (v *logVerifier) checkConsistency(cp tlog.TreeHead) {
	head := v.rep.Head
	switch {
	case cp.Origin != head.Origin:
		v.problem(-1, "", "the checkpoint is of log %q, this store's log is %q", cp.Origin, head.Origin)
	case cp.Size > head.Size:
		v.problem(int64(head.Size), "", "the store was cut back: the checkpoint has %d leaves, the log %d (leaves %d to %d are gone)", cp.Size, head.Size, head.Size, cp.Size-1)
	default:
		p, err := consistencyProof(v.hashes, cp.Size, head.Size)
		if err == nil {
			err = proof.VerifyConsistency(tlog.Hasher, cp.Size, head.Size, p, cp.Root, head.Root)
		}
		if err != nil {
			v.problem(-1, "", "the log's first %d leaves do not hash to the checkpoint's root: a leaf before %d was changed, or the log replaced (%v)", cp.Size, cp.Size, err)
		}
	}
}

// subtreeHash is the hash of the tree node id over leaves (RFC 6962's MTH
// of the leaves it covers), its range cut at len(leaves) for a node at the
// right edge.
func subtreeHash(leaves [][]byte, id compact.NodeID) ([]byte, error) {
	begin, end := id.Coverage()
	end = min(end, uint64(len(leaves)))
	if begin >= end {
		return nil, fmt.Errorf("node %d.%d lies past the log's %d leaves", id.Level, id.Index, len(leaves))
	}
	return mth(leaves[begin:end]), nil
}

// mth is RFC 6962's Merkle Tree Hash of leaf hashes, whose left subtree is
// the largest power of two below their count.
func mth(leaves [][]byte) []byte {
	if len(leaves) == 1 {
		return leaves[0]
	}
	k := 1
	for k*2 < len(leaves) {
		k *= 2
	}
	return tlog.Hasher.HashChildren(mth(leaves[:k]), mth(leaves[k:]))
}

// proofHashes fills in the hashes of a proof's nodes from the leaves.
func proofHashes(leaves [][]byte, nodes proof.Nodes) ([][]byte, error) {
	hashes := make([][]byte, len(nodes.IDs))
	for i, id := range nodes.IDs {
		h, err := subtreeHash(leaves, id)
		if err != nil {
			return nil, err
		}
		hashes[i] = h
	}
	return nodes.Rehash(hashes, tlog.Hasher.HashChildren)
}

func consistencyProof(leaves [][]byte, size1, size2 uint64) ([][]byte, error) {
	nodes, err := proof.Consistency(size1, size2)
	if err != nil {
		return nil, err
	}
	return proofHashes(leaves[:size2], nodes)
}

// causeOf is a damage error's cause alone, as the report names the store.
func causeOf(err error) string {
	if d, ok := err.(*DamagedError); ok {
		return d.Cause
	}
	return err.Error()
}

var errNotInLog = errors.New("no leaf of the store's log stores it")

// IsNotInLog reports whether Inclusion's error says a snapshot is not in
// the log (not stored, or stored by a gpusnap without it).
func IsNotInLog(err error) bool { return errors.Is(err, errNotInLog) }

// Inclusion proves that the leaf storing each of ids is in the log, all at
// the log's current head. A snapshot no leaf stores is an error.
func (s *Store) Inclusion(ids ...string) ([]tlog.InclusionProof, error) {
	var out []tlog.InclusionProof
	err := s.view(func(tx *bolt.Tx) error {
		v := &logVerifier{s: s, tx: tx, rep: &LogReport{}, live: map[string]live{}}
		if err := v.readLeaves(); err != nil {
			return err
		}
		texts := tx.Bucket(bucketLog)
		for _, id := range ids {
			l, ok := v.live[id]
			if !ok || texts == nil {
				return fmt.Errorf("snapshot %s: %w", id, errNotInLog)
			}
			nodes, err := proof.Inclusion(l.leaf, v.rep.Head.Size)
			if err != nil {
				return err
			}
			hashes, err := proofHashes(v.hashes, nodes)
			if err != nil {
				return err
			}
			out = append(out, tlog.InclusionProof{Snapshot: id, LeafIndex: l.leaf, Leaf: string(texts.Get(seqKey(l.leaf))), Hashes: hashes, Head: v.rep.Head})
		}
		return nil
	})
	return out, err
}
