package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/gpusnap/gpusnap/snapshot"
)

// fillSequential packs buckets whose keys only grow (time-sorted ids,
// sequence numbers): bbolt's default half-full split wastes half of each page.
const fillSequential = 0.95

// Put stores a snapshot under its ID. A process whose JSON is identical to
// one already stored is referenced, not stored again.
func (s *Store) Put(snap *snapshot.Snapshot) error {
	if snap.ID == "" {
		return errors.New("store: snapshot has no id")
	}
	if strings.ContainsRune(snap.Tenant, 0) {
		return errors.New("store: tenant contains a NUL byte")
	}
	// Encode outside the write transaction, so the lock is held for the commit only.
	type encoded struct {
		sum  [sha256.Size]byte
		json []byte
	}
	procs := make([]encoded, len(snap.Processes))
	for i := range snap.Processes {
		b, err := json.Marshal(&snap.Processes[i])
		if err != nil {
			return fmt.Errorf("store: encode process %d: %w", snap.Processes[i].PID, err)
		}
		procs[i] = encoded{sha256.Sum256(b), b}
	}
	header := *snap
	header.Processes = nil
	hb, err := json.Marshal(&header)
	if err != nil {
		return fmt.Errorf("store: encode snapshot: %w", err)
	}
	mb, err := json.Marshal(metaOf(snap))
	if err != nil {
		return fmt.Errorf("store: encode snapshot: %w", err)
	}
	id := []byte(snap.ID)

	return s.update(func(tx *bolt.Tx) error {
		b, err := s.buckets(tx, bucketMeta, bucketSnapshots, bucketRefs, bucketProcs, bucketHashes, bucketBaselines)
		if err != nil {
			return err
		}
		meta, snaps, refs, procsB, hashes, baselines := b[0], b[1], b[2], b[3], b[4], b[5]
		if meta.Get(id) != nil {
			return fmt.Errorf("%w: %s", ErrExists, snap.ID)
		}
		for _, bk := range []*bolt.Bucket{meta, snaps, refs, procsB} {
			bk.FillPercent = fillSequential
		}
		seqs := make([]uint64, len(procs))
		for i, p := range procs {
			if v := hashes.Get(p.sum[:]); v != nil {
				if len(v) != 8 {
					return s.damaged("process hash index entry of %d bytes", len(v))
				}
				seqs[i] = binary.BigEndian.Uint64(v)
				continue
			}
			seq, err := procsB.NextSequence()
			if err != nil {
				return err
			}
			rec := compress(append(make([]byte, 0, sha256.Size+len(p.json)/2), p.sum[:]...), p.json)
			if err := procsB.Put(seqKey(seq), rec); err != nil {
				return err
			}
			if err := hashes.Put(p.sum[:], seqKey(seq)); err != nil {
				return err
			}
			seqs[i] = seq
		}
		if err := refs.Put(id, encodeRefs(seqs, snap.Processes == nil)); err != nil {
			return err
		}
		if err := snaps.Put(id, compress(nil, hb)); err != nil {
			return err
		}
		if err := meta.Put(id, mb); err != nil {
			return err
		}
		if snap.Label == snapshot.LabelBaseline && snap.Tenant != "" {
			return baselines.Put(baselineKey(snap.Tenant, snap.ID), nil)
		}
		return nil
	})
}

// Get loads a snapshot by its full id or any unique prefix.
func (s *Store) Get(idOrPrefix string) (*snapshot.Snapshot, error) {
	var snap *snapshot.Snapshot
	err := s.view(func(tx *bolt.Tx) error {
		id, err := s.resolve(tx, idOrPrefix)
		if err != nil {
			return err
		}
		snap, err = s.load(tx, id)
		return err
	})
	return snap, err
}

// Resolve turns an id or unique prefix into the full id.
func (s *Store) Resolve(idOrPrefix string) (string, error) {
	var id string
	err := s.view(func(tx *bolt.Tx) (err error) {
		id, err = s.resolve(tx, idOrPrefix)
		return err
	})
	return id, err
}

// maxCandidates bounds how many matches an ambiguous-prefix error names.
const maxCandidates = 5

func (s *Store) resolve(tx *bolt.Tx, idOrPrefix string) (string, error) {
	if idOrPrefix == "" {
		return "", fmt.Errorf("%w: the id is empty", ErrNotFound)
	}
	b, err := s.buckets(tx, bucketMeta)
	if err != nil {
		return "", err
	}
	prefix := []byte(idOrPrefix)
	c := b[0].Cursor()
	var matches []string
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		if len(matches) == maxCandidates {
			matches = append(matches, "...")
			break
		}
		matches = append(matches, string(k))
	}
	switch {
	case len(matches) == 0:
		return "", fmt.Errorf("%w %q in store %s (see gpusnap list)", ErrNotFound, idOrPrefix, s.path)
	case len(matches) > 1 && matches[0] != idOrPrefix:
		return "", fmt.Errorf("%w: %q matches %s", ErrAmbiguous, idOrPrefix, strings.Join(matches, ", "))
	}
	return matches[0], nil
}

// load reads snapshot id: its header, then each process record it references.
func (s *Store) load(tx *bolt.Tx, id string) (*snapshot.Snapshot, error) {
	b, err := s.buckets(tx, bucketSnapshots, bucketRefs, bucketProcs)
	if err != nil {
		return nil, err
	}
	hv, rv := b[0].Get([]byte(id)), b[1].Get([]byte(id))
	if hv == nil || rv == nil {
		return nil, s.damaged("snapshot %s is listed but its records are missing", id)
	}
	hb, err := decompress(hv)
	if err != nil {
		return nil, s.damaged("snapshot %s: %v", id, err)
	}
	snap := new(snapshot.Snapshot)
	if err := json.Unmarshal(hb, snap); err != nil {
		return nil, s.damaged("snapshot %s: %v", id, err)
	}
	seqs, isNil, err := decodeRefs(rv)
	if err != nil {
		return nil, s.damaged("snapshot %s: %v", id, err)
	}
	if !isNil {
		snap.Processes = make([]snapshot.Process, len(seqs))
	}
	for i, seq := range seqs {
		if err := s.loadProcess(b[2], seq, &snap.Processes[i]); err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", id, err)
		}
	}
	return snap, nil
}

func (s *Store) loadProcess(procs *bolt.Bucket, seq uint64, p *snapshot.Process) error {
	v := procs.Get(seqKey(seq))
	if len(v) < sha256.Size {
		return s.damaged("process record %d is missing", seq)
	}
	pb, err := decompress(v[sha256.Size:])
	if err != nil {
		return s.damaged("process record %d: %v", seq, err)
	}
	if err := json.Unmarshal(pb, p); err != nil {
		return s.damaged("process record %d: %v", seq, err)
	}
	return nil
}

// LatestBaseline loads the newest baseline of tenant, or ErrNoBaseline.
func (s *Store) LatestBaseline(tenant string) (*snapshot.Snapshot, error) {
	var snap *snapshot.Snapshot
	err := s.view(func(tx *bolt.Tx) error {
		b, err := s.buckets(tx, bucketBaselines)
		if err != nil {
			return err
		}
		id, ok := latestBaseline(b[0].Cursor(), tenant)
		if !ok {
			return fmt.Errorf("%w for tenant %q in store %s (run gpusnap baseline --tenant first)", ErrNoBaseline, tenant, s.path)
		}
		snap, err = s.load(tx, id)
		return err
	})
	return snap, err
}

func baselineKey(tenant, id string) []byte { return []byte(tenant + "\x00" + id) }

// latestBaseline seeks just past tenant's keys and steps back one.
func latestBaseline(c *bolt.Cursor, tenant string) (string, bool) {
	k, _ := c.Seek([]byte(tenant + "\x01"))
	if k == nil {
		k, _ = c.Last()
	} else {
		k, _ = c.Prev()
	}
	prefix := []byte(tenant + "\x00")
	if !bytes.HasPrefix(k, prefix) {
		return "", false
	}
	return string(k[len(prefix):]), true
}

// List describes the stored snapshots that match f, newest first.
func (s *Store) List(f Filter) ([]Meta, error) {
	out := []Meta{}
	err := s.view(func(tx *bolt.Tx) error {
		b, err := s.buckets(tx, bucketMeta)
		if err != nil {
			return err
		}
		c := b[0].Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			var m Meta
			if err := json.Unmarshal(v, &m); err != nil {
				return s.damaged("snapshot %s: %v", k, err)
			}
			if f.match(m) {
				out = append(out, m)
			}
		}
		return nil
	})
	return out, err
}
