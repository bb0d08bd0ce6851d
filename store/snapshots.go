package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"

	bolt "go.etcd.io/bbolt"

	"github.com/gpusnap/gpusnap/snapshot"
)

// fillSequential packs buckets whose keys only grow (time-sorted ids,
// sequence numbers): bbolt's default half-full split wastes half of each page.
const fillSequential = 0.95

// Put stores a snapshot under its ID and appends a put leaf to the store's
// log. A process whose JSON is identical to one already stored is
// referenced, not stored again.
func (s *Store) Put(snap *snapshot.Snapshot) error {
	procs, err := s.EncodeProcesses(snap)
	if err != nil {
		return err
	}
	return s.PutEncoded(snap, procs)
}

// EncodeProcesses returns the JSON of each process of snap as Put stores
// it (json.Marshal), encoded on every CPU: encoding is most of a Put's cost.
// A caller that also prints the processes encodes them once and hands them
// to PutEncoded.
func (s *Store) EncodeProcesses(snap *snapshot.Snapshot) ([][]byte, error) {
	procs := make([][]byte, len(snap.Processes))
	err := s.parallel(len(procs), func(i int) error {
		b, err := json.Marshal(&snap.Processes[i])
		if err != nil {
			return fmt.Errorf("store: encode process %d: %w", snap.Processes[i].PID, err)
		}
		procs[i] = b
		return nil
	})
	return procs, err
}

// PutEncoded is Put of snap whose processes EncodeProcesses encoded.
func (s *Store) PutEncoded(snap *snapshot.Snapshot, processJSON [][]byte) error {
	if snap.ID == "" {
		return errors.New("store: snapshot has no id")
	}
	if strings.ContainsRune(snap.Tenant, 0) {
		return errors.New("store: tenant contains a NUL byte")
	}
	if len(processJSON) != len(snap.Processes) {
		return fmt.Errorf("store: %d encoded processes for %d processes", len(processJSON), len(snap.Processes))
	}
	// Hash outside the write transaction, so the lock is held for the
	// commit only.
	type encoded struct {
		sum  [sha256.Size]byte
		json []byte
	}
	procs := make([]encoded, len(processJSON))
	for i, b := range processJSON {
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
	sums := make([][sha256.Size]byte, len(procs))
	for i := range procs {
		sums[i] = procs[i].sum
	}
	put := Leaf{Op: OpPut, Snapshots: []LeafSnapshot{{ID: snap.ID, Digest: SnapshotDigest(mb, hb, sums, snap.Processes == nil)}}}
	hb = compress(nil, hb)
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
		// Opened before anything is written: a log that begins here adopts
		// what was stored before, not this snapshot.
		log, err := s.openLog(tx)
		if err != nil {
			return err
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
				// Reuse a record only if it still is what its hash says: a
				// corrupt record reused would be written into every later
				// snapshot, each then unreadable.
				if err := s.checkRecord(procsB, seqs[i], p.sum); err != nil {
					return err
				}
				continue
			}
			seq, err := procsB.NextSequence()
			if err != nil {
				return err
			}
			stored := encodeRecord(p.json)
			rec := append(append(make([]byte, 0, sha256.Size+len(stored)), p.sum[:]...), stored...)
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
		if err := snaps.Put(id, hb); err != nil {
			return err
		}
		if err := meta.Put(id, mb); err != nil {
			return err
		}
		if snap.Label == snapshot.LabelBaseline && snap.Tenant != "" {
			if err := baselines.Put(baselineKey(snap.Tenant, snap.ID), nil); err != nil {
				return err
			}
		}
		return log.append(put)
	})
}

// checkRecord checks that process record seq holds the JSON whose hash is sum.
func (s *Store) checkRecord(procs *bolt.Bucket, seq uint64, sum [sha256.Size]byte) error {
	v := procs.Get(seqKey(seq))
	if len(v) < sha256.Size {
		return s.damaged("process record %d, indexed by its hash, is missing", seq)
	}
	json, err := decodeRecord(v[sha256.Size:])
	if err != nil {
		return s.damaged("process record %d: %v", seq, err)
	}
	if !bytes.Equal(v[:sha256.Size], sum[:]) || sha256.Sum256(json) != sum {
		return s.damaged("process record %d does not match its hash", seq)
	}
	return nil
}

// Get loads a snapshot by its full id or any unique prefix.
func (s *Store) Get(idOrPrefix string) (*snapshot.Snapshot, error) {
	return s.GetSelected(idOrPrefix, nil)
}

// GetSelected loads a snapshot with only the processes whose stored JSON keep
// accepts (all when keep is nil). Decoding JSON is nearly all a load costs:
// a summary that shows a few processes of a thousand skips the rest.
func (s *Store) GetSelected(idOrPrefix string, keep func(processJSON []byte) bool) (*snapshot.Snapshot, error) {
	var snap *snapshot.Snapshot
	err := s.view(func(tx *bolt.Tx) error {
		id, err := s.resolve(tx, idOrPrefix)
		if err != nil {
			return err
		}
		snap, err = s.load(tx, id, keep)
		return err
	})
	return snap, err
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

// record is a stored snapshot as its bytes: the header's JSON and the JSON
// of each process, in order. procs is nil for a snapshot whose process list
// was nil. The process JSON is bbolt's mmap: valid inside the transaction.
type record struct {
	header []byte
	procs  [][]byte
}

func (s *Store) record(tx *bolt.Tx, id string) (record, error) {
	var r record
	b, err := s.buckets(tx, bucketSnapshots, bucketRefs, bucketProcs)
	if err != nil {
		return r, err
	}
	hv, rv := b[0].Get([]byte(id)), b[1].Get([]byte(id))
	if hv == nil || rv == nil {
		return r, s.damaged("snapshot %s is listed but its records are missing", id)
	}
	if r.header, err = decompress(hv, maxHeaderSize); err != nil {
		return r, s.damaged("snapshot %s: %v", id, err)
	}
	seqs, isNil, err := decodeRefs(rv)
	if err != nil {
		return r, s.damaged("snapshot %s: %v", id, err)
	}
	if isNil {
		return r, nil
	}
	// A snapshot's processes differ (each has its own PID), so a record
	// listed twice is damage: a crafted list of one record a million times
	// would otherwise cost a million decodes.
	seen := make(map[uint64]struct{}, len(seqs))
	r.procs = make([][]byte, len(seqs))
	for i, seq := range seqs {
		if _, dup := seen[seq]; dup {
			return r, s.damaged("snapshot %s: process record %d is listed twice", id, seq)
		}
		seen[seq] = struct{}{}
		v := b[2].Get(seqKey(seq))
		if len(v) < sha256.Size {
			return r, s.damaged("snapshot %s: process record %d is missing", id, seq)
		}
		if r.procs[i], err = decodeRecord(v[sha256.Size:]); err != nil {
			return r, s.damaged("snapshot %s: process record %d: %v", id, seq, err)
		}
	}
	return r, nil
}

// load reads snapshot id: its header, then each process record it
// references that keep accepts.
func (s *Store) load(tx *bolt.Tx, id string, keep func([]byte) bool) (*snapshot.Snapshot, error) {
	r, err := s.record(tx, id)
	if err != nil {
		return nil, err
	}
	if keep != nil && r.procs != nil {
		kept := make([][]byte, 0, len(r.procs))
		for _, p := range r.procs {
			if keep(p) {
				kept = append(kept, p)
			}
		}
		r.procs = kept
	}
	snap := new(snapshot.Snapshot)
	if err := json.Unmarshal(r.header, snap); err != nil {
		return nil, s.damaged("snapshot %s: %v", id, err)
	}
	if r.procs != nil {
		snap.Processes = make([]snapshot.Process, len(r.procs))
	}
	if err := s.decodeProcesses(r.procs, snap.Processes); err != nil {
		var d *DamagedError
		if errors.As(err, &d) { // keep the one-line "store FILE is damaged: ..." form
			return nil, s.damaged("snapshot %s: %s", id, d.Cause)
		}
		return nil, err
	}
	return snap, nil
}

// nullProcesses is how the header, stored without its processes, ends its
// processes field. No other raw `"processes":null` can precede it: quotes
// inside JSON strings are escaped, and no map comes before it in Snapshot.
var nullProcesses = []byte(`"processes":null`)

// GetJSON returns a snapshot's JSON, byte for byte what json.Marshal made of
// the Snapshot given to Put. Marshalling what Get returns can differ: invalid
// UTF-8 is written as \ufffd and read back as U+FFFD, which marshals as
// itself. show --json prints this, indented, so it prints exactly what
// snapshot --json printed, and faster, with nothing decoded.
func (s *Store) GetJSON(idOrPrefix string) ([]byte, error) {
	var out []byte
	err := s.view(func(tx *bolt.Tx) error {
		id, err := s.resolve(tx, idOrPrefix)
		if err != nil {
			return err
		}
		r, err := s.record(tx, id)
		if err != nil {
			return err
		}
		if r.procs == nil {
			out = r.header
			return nil
		}
		at := bytes.Index(r.header, nullProcesses)
		if at < 0 {
			return s.damaged("snapshot %s: header has no processes field", id)
		}
		size := len(r.header) + len(r.procs)
		for _, p := range r.procs {
			size += len(p)
		}
		out = make([]byte, 0, size)
		out = append(out, r.header[:at]...)
		out = append(out, `"processes":[`...)
		for i, p := range r.procs {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, p...)
		}
		out = append(out, ']')
		out = append(out, r.header[at+len(nullProcesses):]...)
		return nil
	})
	return out, err
}

// decodeProcesses unmarshals the process records on every CPU: decoding
// JSON is nearly all of what loading a snapshot costs. The records are
// bbolt's mmap, valid while the transaction that read them is open.
func (s *Store) decodeProcesses(raw [][]byte, out []snapshot.Process) error {
	return s.parallel(len(raw), func(i int) error {
		if err := json.Unmarshal(raw[i], &out[i]); err != nil {
			return s.damaged("process record: %v", err)
		}
		return nil
	})
}

// parallel runs fn for 0..n-1 on every CPU and returns the errors. A fault
// reading bbolt's mmap in a worker becomes a damage report, as in view.
func (s *Store) parallel(n int, fn func(i int) error) error {
	workers := min(runtime.GOMAXPROCS(0), n)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			defer s.recoverDamage(&errs[w])
			defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
			for i := w; i < n; i += workers {
				if errs[w] = fn(i); errs[w] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
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
		snap, err = s.load(tx, id, nil)
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
