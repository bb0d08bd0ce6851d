package store

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
)

// CheckResult is what Check found.
type CheckResult struct {
	Snapshots int   // snapshots listed
	Processes int   // process records (each stored once, however many snapshots share it)
	Size      int64 // bytes of the file bbolt uses
	// Problems are bbolt's consistency errors (page structure, freelist) and
	// gpusnap's own (a snapshot referencing a missing process record ...).
	Problems []string
}

// maxProblems bounds the report, as a wrecked file can yield one error per page.
const maxProblems = 100

// Check runs bbolt's consistency check over every page, then checks that
// gpusnap's records agree with each other. A panic on a corrupt page becomes
// a problem, not a crash.
func (s *Store) Check() (CheckResult, error) {
	var r CheckResult
	add := func(format string, args ...any) {
		if len(r.Problems) < maxProblems {
			r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
		}
	}
	err := s.view(func(tx *bolt.Tx) error {
		r.Size = tx.Size()
		// bbolt checks in its own goroutine and reports its panics as errors.
		for err := range tx.Check() {
			add("%v", err)
		}
		if len(r.Problems) > 0 {
			return nil // the records cannot be trusted enough to walk
		}
		s.checkRecords(tx, &r, add)
		return nil
	})
	var d *DamagedError
	if errors.As(err, &d) {
		add("%s", d.Cause)
		return r, nil
	}
	return r, err
}

func (s *Store) checkRecords(tx *bolt.Tx, r *CheckResult, add func(string, ...any)) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	for _, name := range allBuckets {
		if tx.Bucket(name) == nil {
			add("bucket %s is missing", name)
		}
	}
	if len(r.Problems) > 0 {
		return
	}
	meta, snaps, refs, procs, hashes, baselines := tx.Bucket(bucketMeta), tx.Bucket(bucketSnapshots),
		tx.Bucket(bucketRefs), tx.Bucket(bucketProcs), tx.Bucket(bucketHashes), tx.Bucket(bucketBaselines)
	_ = meta.ForEach(func(k, _ []byte) error {
		r.Snapshots++
		id := string(k)
		if snaps.Get(k) == nil || refs.Get(k) == nil {
			add("snapshot %s is listed but its records are missing", id)
			return nil
		}
		if _, err := s.load(tx, id, nil, nil); err != nil {
			var d *DamagedError
			if errors.As(err, &d) {
				add("%s", d.Cause) // names the snapshot already
			} else {
				add("snapshot %s: %v", id, err)
			}
		}
		return nil
	})
	recs := newRecords(tx, procs)
	_ = procs.ForEach(func(k, v []byte) error {
		r.Processes++
		if len(k) != 8 || len(v) < sha256.Size {
			add("process record %x is malformed", k)
			return nil
		}
		seq := binary.BigEndian.Uint64(k)
		if at := hashes.Get(v[:sha256.Size]); len(at) != 8 || binary.BigEndian.Uint64(at) != seq {
			add("process record %d is missing from the hash index", seq)
		}
		rec, err := recs.parse(v)
		if err == nil {
			_, err = rec.appendJSON(nil)
		}
		if err != nil {
			add("process record %d does not match its hash: %v", seq, err)
		}
		return nil
	})
	if n := hashes.Stats().KeyN; n != r.Processes {
		add("hash index has %d entries for %d process records", n, r.Processes)
	}
	_ = baselines.ForEach(func(k, _ []byte) error {
		for i, c := range k {
			if c == 0 {
				if meta.Get(k[i+1:]) == nil {
					add("baseline index names missing snapshot %s", k[i+1:])
				}
				return nil
			}
		}
		add("baseline index key %q has no tenant separator", k)
		return nil
	})
}

// Usage is how much room the store takes.
type Usage struct {
	FileBytes int64 // the file's size, which bbolt grows ahead of need, in steps
	UsedBytes int64 // pages holding data, the high-water mark less free pages (free pages are known read-write only)
}

// Usage measures the store's size, for benchmarks and operators.
func (s *Store) Usage() (Usage, error) {
	var u Usage
	fi, err := os.Stat(s.path)
	if err != nil {
		return u, err
	}
	u.FileBytes = fi.Size()
	err = s.view(func(tx *bolt.Tx) error {
		st := s.db.Stats()
		u.UsedBytes = tx.Size() - int64(st.FreePageN+st.PendingPageN)*int64(s.db.Info().PageSize)
		return nil
	})
	return u, err
}
