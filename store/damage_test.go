package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gpusnap/gpusnap/snapshot"
)

const pageSize = 4096 // bbolt's default on this platform

// soundStore writes a store of several snapshots spread over many pages.
func soundStore(t *testing.T) (path string, ids []string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "sound.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	for i := range 20 {
		snap := fakeSnapshot(t0.Add(time.Duration(i)*time.Second), snapshot.LabelBaseline, "job-1", 150)
		for j := range snap.Processes {
			snap.Processes[j].StartTime += uint64(i * 1000) // all new: many process pages
		}
		if err := s.Put(snap); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, snap.ID)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path, ids
}

// freelistPages reads the freelist page id of both meta pages (the page
// header is 16 bytes; the meta's freelist field follows magic, version,
// page size, flags and the 16-byte root bucket).
func freelistPages(data []byte) []int {
	var out []int
	for m := range 2 {
		off := m*pageSize + 16 + 4 + 4 + 4 + 4 + 16
		out = append(out, int(binary.LittleEndian.Uint64(data[off:])))
	}
	return out
}

func TestDamagedFilesAreReportedNotPanicked(t *testing.T) {
	path, ids := soundStore(t)
	sound, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pages := len(sound) / pageSize
	if pages < 20 {
		t.Fatalf("store has only %d pages", pages)
	}
	damages := map[string]func([]byte) []byte{
		"garbage": func(b []byte) []byte {
			for i := range b {
				b[i] = byte(i*7919 + i>>8)
			}
			return b
		},
		"truncated":              func(b []byte) []byte { return b[:len(b)/3] },
		"truncated-within-metas": func(b []byte) []byte { return b[:pageSize+904] },
		"zeroed-pages": func(b []byte) []byte {
			clear(b[2*pageSize:]) // every page but the metas: the trees' roots are gone
			return b
		},
		"zeroed-data-pages": func(b []byte) []byte {
			for p := 2; p < pages; p += 3 {
				clear(b[p*pageSize : (p+1)*pageSize])
			}
			return b
		},
		"corrupt-freelist": func(b []byte) []byte {
			for _, p := range freelistPages(b) {
				page := b[p*pageSize : (p+1)*pageSize]
				// Keep the freelist flag; claim 1000 free pages far beyond the file.
				binary.LittleEndian.PutUint16(page[10:], 1000)
				for i := 16; i+8 <= len(page); i += 8 {
					binary.LittleEndian.PutUint64(page[i:], uint64(1)<<40+uint64(i))
				}
			}
			return b
		},
		"empty-metas": func(b []byte) []byte {
			clear(b[:2*pageSize])
			return b
		},
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			damaged := damage(bytes.Clone(sound))
			file := filepath.Join(t.TempDir(), "gpusnap.db")
			if err := os.WriteFile(file, damaged, 0o600); err != nil {
				t.Fatal(err)
			}
			var errs []error
			for _, ro := range []bool{true, false} {
				s, err := Open(file, Options{ReadOnly: ro, LockTimeout: time.Second})
				if err != nil {
					errs = append(errs, err)
					continue
				}
				_, err = s.List(Filter{})
				errs = append(errs, err)
				for _, id := range ids {
					_, err = s.Get(id)
					errs = append(errs, err)
				}
				_, err = s.LatestBaseline("job-1")
				errs = append(errs, err)
				r, err := s.Check()
				errs = append(errs, err)
				if len(r.Problems) == 0 {
					t.Errorf("check (read-only %v) found nothing", ro)
				}
				if err := s.Close(); err != nil {
					t.Errorf("close after damage: %v", err)
				}
			}
			found := false
			for _, err := range errs {
				if err == nil {
					continue
				}
				if !errors.Is(err, ErrDamaged) || !strings.HasPrefix(err.Error(), "store "+file+" is damaged: ") {
					t.Errorf("error is not a damage report: %v", err)
				}
				found = true
			}
			if !found {
				t.Error("no operation reported the damage")
			}
			after, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(after, damaged) {
				t.Error("the damaged file was changed")
			}
			// The lock is released: another writer can get at the file.
			if s, err := Open(file, Options{LockTimeout: 200 * time.Millisecond}); errors.Is(err, ErrLocked) {
				t.Error("damage left the file locked")
			} else if err == nil {
				_ = s.Close()
			}
		})
	}
}

// TestCheckFindsBrokenRecords breaks gpusnap's own records in a sound bbolt
// file: bbolt's check passes, gpusnap's finds it.
func TestCheckFindsBrokenRecords(t *testing.T) {
	s, _ := openTemp(t)
	snap := fakeSnapshot(time.Now(), snapshot.LabelBaseline, "job-1", 5)
	if err := s.Put(snap); err != nil {
		t.Fatal(err)
	}
	err := s.update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketProcs).Delete(seqKey(3)); err != nil {
			return err
		}
		broken := append(bytes.Clone(tx.Bucket(bucketProcs).Get(seqKey(2))[:32]), "{not json"...)
		if err := tx.Bucket(bucketProcs).Put(seqKey(2), broken); err != nil {
			return err
		}
		return tx.Bucket(bucketBaselines).Put(baselineKey("job-2", "20990101-000000.000000-000000"), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Check()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"process record 3 is missing", "hash index has 5 entries for 4 process records", "baseline index names missing snapshot 20990101"}
	for _, w := range want {
		if !strings.Contains(strings.Join(r.Problems, "\n"), w) {
			t.Errorf("check misses %q: %v", w, r.Problems)
		}
	}
	if _, err := s.Get(snap.ID); !errors.Is(err, ErrDamaged) || !strings.HasPrefix(err.Error(), "store "+s.path+" is damaged: snapshot "+snap.ID) {
		t.Errorf("Get of a snapshot with broken records: %v", err)
	}
	if err := s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketProcs).Put(seqKey(3), tx.Bucket(bucketProcs).Get(seqKey(4)))
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(snap.ID); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "is damaged: snapshot "+snap.ID+": process record ") {
		t.Errorf("Get of a snapshot with an undecodable record: %v", err)
	}
}

// TestZeroedPageNeverWrittenThrough zeroes one tree page at a time of a
// sound store (a leaf of process records, an index, a branch) and stores a
// snapshot whose 3,000 processes are all records the store already holds,
// so deduplication reuses every one. Either the store is called damaged
// and the file is left as it was, or the new snapshot reads back whole:
// never an id printed that cannot be read.
func TestZeroedPageNeverWrittenThrough(t *testing.T) {
	path, _ := soundStore(t)
	sound, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	reuse := fakeSnapshot(time.Now(), snapshot.LabelPost, "job-1", 0)
	for i := range 20 { // soundStore's snapshots' processes, every one
		for _, p := range fakeSnapshot(time.Now(), snapshot.LabelPost, "job-1", 150).Processes {
			p.StartTime += uint64(i * 1000)
			reuse.Processes = append(reuse.Processes, p)
		}
	}
	encoded, err := (&Store{}).EncodeProcesses(reuse) // once: encoding is most of a Put
	if err != nil {
		t.Fatal(err)
	}
	const branch, leaf = 0x01, 0x02 // bbolt's page flags
	var tree []int
	for p := 2; p < len(sound)/pageSize; p++ {
		if flags := binary.LittleEndian.Uint16(sound[p*pageSize+8:]); flags == branch || flags == leaf {
			tree = append(tree, p)
		}
	}
	refused, stored := 0, 0
	for i := 0; i < len(tree); i += 8 { // one in eight: every kind of page, in a few seconds
		p := tree[i]
		damaged := bytes.Clone(sound)
		clear(damaged[p*pageSize : (p+1)*pageSize])
		file := filepath.Join(t.TempDir(), "gpusnap.db")
		if err := os.WriteFile(file, damaged, 0o600); err != nil {
			t.Fatal(err)
		}
		err := putOnce(file, reuse, encoded)
		switch {
		case err == nil:
			s, err := Open(file, Options{ReadOnly: true, LockTimeout: time.Second})
			if err != nil {
				t.Fatalf("page %d zeroed: stored %s, then: %v", p, reuse.ID, err)
			}
			got, err := s.Get(reuse.ID)
			s.Close()
			if err != nil || len(got.Processes) != len(reuse.Processes) {
				t.Errorf("page %d zeroed: stored %s, which does not read back: %v", p, reuse.ID, err)
			}
			stored++
		case !errors.Is(err, ErrDamaged):
			t.Errorf("page %d zeroed: %v, not a damage report", p, err)
		default:
			if after, _ := os.ReadFile(file); !bytes.Equal(after, damaged) {
				t.Errorf("page %d zeroed: %v, and the file was written", p, err)
			}
			refused++
		}
	}
	t.Logf("%d zeroed pages refused, %d did not touch what the snapshot reuses", refused, stored)
	if refused == 0 {
		t.Error("no zeroed page was noticed")
	}
}

// putOnce opens file read-write, stores snap (its processes encoded) and
// closes it.
func putOnce(file string, snap *snapshot.Snapshot, encoded [][]byte) error {
	s, err := Open(file, Options{LockTimeout: time.Second})
	if err != nil {
		return err
	}
	err = s.PutEncoded(snap, encoded)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return err
}
