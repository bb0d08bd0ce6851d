package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store/tlog"
)

// ErrProtected is returned by Remove for a tenant's latest baseline without force.
var ErrProtected = errors.New("is the latest baseline of its tenant")

// Remove deletes the snapshot named by a full id or unique prefix and the
// process records no other snapshot shares, appends a remove leaf to the
// log, and returns its full id. A tenant's latest baseline is kept unless
// force is set, since the next diff needs it.
func (s *Store) Remove(idOrPrefix string, force bool) (string, error) {
	var id string
	err := s.update(func(tx *bolt.Tx) error {
		var err error
		if id, err = s.resolve(tx, idOrPrefix); err != nil {
			return err
		}
		m, err := s.meta(tx, id)
		if err != nil {
			return err
		}
		if !force {
			protected, err := s.latestBaselines(tx)
			if err != nil {
				return err
			}
			if protected[id] {
				return fmt.Errorf("snapshot %s %w %q (use --force to remove it anyway)", id, ErrProtected, m.Tenant)
			}
		}
		log, err := s.openLog(tx)
		if err != nil {
			return err
		}
		digest, err := s.storedDigest(tx, id, nil)
		if err != nil {
			return err
		}
		if err := s.delete(tx, m); err != nil {
			return err
		}
		if err := log.append(tlog.Leaf{Op: tlog.OpRemove, Snapshots: []tlog.LeafSnapshot{{ID: id, Digest: digest}}}); err != nil {
			return err
		}
		return s.sweep(tx)
	})
	return id, err
}

// Prune says which snapshots to remove. Among those matching Filter, a
// snapshot is kept when it is one of the KeepLast newest, or newer than
// OlderThan. The rest are removed. A zero rule keeps nothing by itself, and
// at least one rule must be set.
type Prune struct {
	Filter    Filter
	KeepLast  int           // keep this many newest, or 0 for no such rule
	OlderThan time.Duration // remove only snapshots older than this, or 0 for no such rule
	Now       time.Time     // when "older than" is measured from, where zero means time.Now()
	Force     bool          // also remove tenants' latest baselines
	DryRun    bool          // report what would go, remove nothing
}

// Prune removes what p selects, in one prune leaf of the log, and returns
// the snapshots removed (or that would be, with DryRun), newest first.
func (s *Store) Prune(p Prune) ([]Meta, error) {
	if p.KeepLast < 0 || p.OlderThan < 0 {
		return nil, errors.New("prune: --keep-last and --older-than cannot be negative")
	}
	if p.KeepLast == 0 && p.OlderThan == 0 {
		return nil, errors.New("prune: give --keep-last N and/or --older-than DUR")
	}
	if p.Now.IsZero() {
		p.Now = time.Now()
	}
	cutoff := p.Now.Add(-p.OlderThan)
	var removed []Meta
	fn := func(tx *bolt.Tx) error {
		protected, err := s.latestBaselines(tx)
		if err != nil {
			return err
		}
		b, err := s.buckets(tx, bucketMeta)
		if err != nil {
			return err
		}
		c := b[0].Cursor()
		seen := 0
		var victims []Meta
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			var m Meta
			if err := json.Unmarshal(v, &m); err != nil {
				return s.damaged("snapshot %s: %v", k, err)
			}
			if !p.Filter.match(m) {
				continue
			}
			seen++
			keep := (p.KeepLast > 0 && seen <= p.KeepLast) ||
				(p.OlderThan > 0 && !m.Time.Before(cutoff)) ||
				(protected[m.ID] && !p.Force)
			if !keep {
				victims = append(victims, m)
			}
		}
		removed = victims
		if p.DryRun || len(victims) == 0 {
			return nil
		}
		log, err := s.openLog(tx)
		if err != nil {
			return err
		}
		leaf := tlog.Leaf{Op: tlog.OpPrune}
		for _, m := range victims {
			digest, err := s.storedDigest(tx, m.ID, nil)
			if err != nil {
				return err
			}
			leaf.Snapshots = append(leaf.Snapshots, tlog.LeafSnapshot{ID: m.ID, Digest: digest})
			if err := s.delete(tx, m); err != nil {
				return err
			}
		}
		if err := log.append(leaf); err != nil {
			return err
		}
		return s.sweep(tx)
	}
	if p.DryRun {
		return removed, s.view(fn)
	}
	return removed, s.update(fn)
}

func (s *Store) meta(tx *bolt.Tx, id string) (Meta, error) {
	var m Meta
	b, err := s.buckets(tx, bucketMeta)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b[0].Get([]byte(id)), &m); err != nil {
		return m, s.damaged("snapshot %s: %v", id, err)
	}
	return m, nil
}

// latestBaselines is the set of ids that are some tenant's latest baseline,
// the last key of each tenant's run in the baselines index. An entry naming
// no snapshot is damage, since taken for the latest it would leave the real
// latest baseline unprotected, and prune would remove it.
func (s *Store) latestBaselines(tx *bolt.Tx) (map[string]bool, error) {
	b, err := s.buckets(tx, bucketBaselines, bucketMeta)
	if err != nil {
		return nil, err
	}
	latest := map[string]bool{}
	c := b[0].Cursor()
	for k, _ := c.First(); k != nil; {
		i := bytes.IndexByte(k, 0)
		if i < 0 {
			return nil, s.damaged("baseline index key %q has no tenant separator", k)
		}
		tenant := string(k[:i])
		id, ok := latestBaseline(c, tenant)
		if !ok {
			return nil, s.damaged("baseline index of tenant %q is unreadable", tenant)
		}
		if b[1].Get([]byte(id)) == nil {
			return nil, s.damaged("baseline index names missing snapshot %s", id)
		}
		latest[id] = true
		// latestBaseline left the cursor on the tenant's last key.
		k, _ = c.Next()
	}
	return latest, nil
}

// delete removes a snapshot's own records, and sweep frees what it referenced.
func (s *Store) delete(tx *bolt.Tx, m Meta) error {
	b, err := s.buckets(tx, bucketMeta, bucketSnapshots, bucketRefs, bucketBaselines)
	if err != nil {
		return err
	}
	id := []byte(m.ID)
	for _, bk := range b[:3] {
		if err := bk.Delete(id); err != nil {
			return err
		}
	}
	if m.Label == snapshot.LabelBaseline && m.Tenant != "" {
		return b[3].Delete(baselineKey(m.Tenant, m.ID))
	}
	return nil
}

// sweep deletes every process record no snapshot references any more. It
// is a mark and sweep, not reference counts, so Put touches no shared
// counters and a count can never drift from the truth.
func (s *Store) sweep(tx *bolt.Tx) error {
	b, err := s.buckets(tx, bucketRefs, bucketProcs, bucketHashes)
	if err != nil {
		return err
	}
	refs, procs, hashes := b[0], b[1], b[2]
	live := map[uint64]bool{}
	err = refs.ForEach(func(k, v []byte) error {
		seqs, _, err := decodeRefs(v)
		if err != nil {
			return s.damaged("snapshot %s: %v", k, err)
		}
		for _, seq := range seqs {
			live[seq] = true
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The dead records are collected first, as deleting under a moving bbolt
	// cursor can skip keys. They are copied too, as the slices bbolt hands
	// out may move once the bucket changes.
	var dead [][2][]byte // seq key, hash
	err = procs.ForEach(func(k, v []byte) error {
		if len(k) != 8 || len(v) < sha256.Size {
			return s.damaged("process record %x is malformed", k)
		}
		if !live[binary.BigEndian.Uint64(k)] {
			dead = append(dead, [2][]byte{bytes.Clone(k), bytes.Clone(v[:sha256.Size])})
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, d := range dead {
		if err := procs.Delete(d[0]); err != nil {
			return err
		}
		if err := hashes.Delete(d[1]); err != nil {
			return err
		}
	}
	return nil
}
