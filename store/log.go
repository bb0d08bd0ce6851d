package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"strings"

	"github.com/transparency-dev/merkle/compact"
	bolt "go.etcd.io/bbolt"

	"github.com/gpusnap/gpusnap/store/tlog"
)

// The store's log is an RFC 6962 Merkle tree with one leaf per change (a
// snapshot stored, removed or pruned, a diff or check result). The log bucket
// maps an 8-byte big-endian index to the leaf's text. The info bucket keeps
// the tree's right border, so an append hashes O(log n) nodes. docs/store.md
// has the leaf format.
var (
	bucketLog    = []byte("log")
	keyLogOrigin = []byte("log-origin")
	keyLogTree   = []byte("log-tree")
)

var rangeFactory = &compact.RangeFactory{Hash: tlog.Hasher.HashChildren}

// logState is the log's border, read and written in a transaction.
type logState struct {
	origin string
	rng    *compact.Range
	leaves *bolt.Bucket
	info   *bolt.Bucket
}

// openLog reads the log's state. A store written before the log began gets
// its log here, one adopt leaf for each snapshot it holds, in id order.
func (s *Store) openLog(tx *bolt.Tx) (*logState, error) {
	info := tx.Bucket(bucketInfo)
	if info == nil {
		return nil, s.damaged("bucket %s is missing", bucketInfo)
	}
	leaves, err := tx.CreateBucketIfNotExists(bucketLog)
	if err != nil {
		return nil, err
	}
	leaves.FillPercent = fillSequential
	st := &logState{origin: string(info.Get(keyLogOrigin)), leaves: leaves, info: info}
	if st.origin != "" {
		st.rng, err = decodeRange(info.Get(keyLogTree))
		if err != nil {
			return nil, s.damaged("log tree: %v", err)
		}
		return st, nil
	}
	if k, _ := leaves.Cursor().First(); k != nil {
		return nil, s.damaged("the log has leaves but no origin")
	}
	st.origin, st.rng = tlog.Origin(hostID()), rangeFactory.NewEmptyRange(0)
	if err := info.Put(keyLogOrigin, []byte(st.origin)); err != nil {
		return nil, err
	}
	return st, s.adopt(tx, st)
}

// adopt appends a leaf for every snapshot already stored.
func (s *Store) adopt(tx *bolt.Tx, st *logState) error {
	b, err := s.buckets(tx, bucketMeta)
	if err != nil {
		return err
	}
	var ids []string
	_ = b[0].ForEach(func(k, _ []byte) error { ids = append(ids, string(k)); return nil })
	for _, id := range ids {
		digest, err := s.storedDigest(tx, id, nil)
		if err != nil {
			return err
		}
		if err := st.append(tlog.Leaf{Op: tlog.OpAdopt, Snapshots: []tlog.LeafSnapshot{{ID: id, Digest: digest}}}); err != nil {
			return err
		}
	}
	return nil
}

// append adds a leaf at the end of the log and stores the new border.
func (st *logState) append(l tlog.Leaf) error {
	l.Index = st.rng.End()
	text := l.Marshal()
	if err := st.rng.Append(tlog.LeafHash(text), nil); err != nil {
		return err
	}
	if err := st.leaves.Put(seqKey(l.Index), text); err != nil {
		return err
	}
	return st.info.Put(keyLogTree, encodeRange(st.rng))
}

func (st *logState) head() (tlog.TreeHead, error) {
	root, err := st.rng.GetRootHash(nil)
	if err != nil {
		return tlog.TreeHead{}, err
	}
	return tlog.TreeHead{Origin: st.origin, Size: st.rng.End(), Root: root}, nil
}

// AppendResult records a diff's or check's result as a leaf and returns the
// log's new head. snapshots are those it compared (an id with an empty
// digest was not stored). findings is the SHA-256 (hex) of its findings'
// JSON, and events seal the event log's segments its window read.
func (s *Store) AppendResult(command, findings string, events []tlog.EventSeal, ids ...string) (tlog.TreeHead, error) {
	var head tlog.TreeHead
	err := s.update(func(tx *bolt.Tx) error {
		st, err := s.openLog(tx)
		if err != nil {
			return err
		}
		l := tlog.Leaf{Op: tlog.OpResult, Command: command, Findings: findings, Events: events}
		meta := tx.Bucket(bucketMeta)
		for _, id := range ids {
			ref := tlog.LeafSnapshot{ID: id}
			if meta.Get([]byte(id)) != nil {
				if ref.Digest, err = s.storedDigest(tx, id, nil); err != nil {
					return err
				}
			}
			l.Snapshots = append(l.Snapshots, ref)
		}
		if err := st.append(l); err != nil {
			return err
		}
		head, err = st.head()
		return err
	})
	return head, err
}

// Head returns the log's origin, size and root. A store whose log has not
// begun has size 0 and the empty tree's root.
func (s *Store) Head() (tlog.TreeHead, error) {
	var head tlog.TreeHead
	err := s.view(func(tx *bolt.Tx) error {
		info := tx.Bucket(bucketInfo)
		if info == nil || info.Get(keyLogOrigin) == nil {
			head = tlog.TreeHead{Origin: tlog.Origin(hostID()), Root: tlog.Hasher.EmptyRoot()}
			return nil
		}
		rng, err := decodeRange(info.Get(keyLogTree))
		if err != nil {
			return s.damaged("log tree: %v", err)
		}
		root, err := rng.GetRootHash(nil)
		head = tlog.TreeHead{Origin: string(info.Get(keyLogOrigin)), Size: rng.End(), Root: root}
		return err
	})
	return head, err
}

// storedDigest computes SnapshotDigest of stored snapshot id from its
// records. checked, when not nil, remembers the process records whose JSON
// was already checked against its hash, so each is hashed once.
func (s *Store) storedDigest(tx *bolt.Tx, id string, checked map[uint64]bool) (string, error) {
	b, err := s.buckets(tx, bucketMeta, bucketSnapshots, bucketRefs, bucketProcs)
	if err != nil {
		return "", err
	}
	key := []byte(id)
	mv, hv, rv := b[0].Get(key), b[1].Get(key), b[2].Get(key)
	if mv == nil || hv == nil || rv == nil {
		return "", s.damaged("snapshot %s: its records are missing", id)
	}
	header, err := decompress(hv, maxHeaderSize)
	if err != nil {
		return "", s.damaged("snapshot %s: %v", id, err)
	}
	seqs, isNil, err := decodeRefs(rv)
	if err != nil {
		return "", s.damaged("snapshot %s: %v", id, err)
	}
	sums := make([][sha256.Size]byte, len(seqs))
	recs := newRecords(tx, b[3])
	for i, seq := range seqs {
		v := recs.value(seq)
		if len(v) < sha256.Size {
			return "", s.damaged("snapshot %s: process record %d is missing", id, seq)
		}
		sums[i] = [sha256.Size]byte(v[:sha256.Size])
		if checked == nil || checked[seq] {
			continue
		}
		// The record's JSON, as stored or as its binary form marshals,
		// must still hash to what the leaf's digest was made of.
		if rec, err := recs.parse(v); err != nil {
			return "", s.damaged("snapshot %s: process record %d was changed: %v", id, seq, err)
		} else if _, err := rec.appendJSON(nil); err != nil {
			return "", s.damaged("snapshot %s: process record %d was changed: %v", id, seq, err)
		}
		checked[seq] = true
	}
	return tlog.SnapshotDigest(mv, header, sums, isNil), nil
}

// hostID names this host in the log's origin by its hostname, with anything
// a note's key name cannot hold (space, +, control bytes) as '-'.
func hostID() string {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "unknown"
	}
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r == '+' || r > '~' {
			return '-'
		}
		return r
	}, name)
}

// encodeRange writes the border, the size (8 bytes) and then its hashes.
func encodeRange(r *compact.Range) []byte {
	out := binary.BigEndian.AppendUint64(nil, r.End())
	for _, h := range r.Hashes() {
		out = append(out, h...)
	}
	return out
}

func decodeRange(v []byte) (*compact.Range, error) {
	if len(v) < 8 || (len(v)-8)%sha256.Size != 0 {
		return nil, fmt.Errorf("%d bytes", len(v))
	}
	size := binary.BigEndian.Uint64(v)
	var hashes [][]byte
	for p := v[8:]; len(p) > 0; p = p[sha256.Size:] {
		hashes = append(hashes, bytes.Clone(p[:sha256.Size]))
	}
	return rangeFactory.NewRange(0, size, hashes)
}
