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
	"slices"
	"strings"
	"sync"

	bolt "go.etcd.io/bbolt"

	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store/tlog"
)

// fillSequential packs buckets whose keys only grow (time-sorted ids,
// sequence numbers), where bbolt's default half-full split wastes half of
// each page.
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
// it (json.Marshal), encoded on every CPU, since encoding is most of a Put's
// cost.
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
		sum       [sha256.Size]byte
		json, bin []byte
	}
	procs := make([]encoded, len(processJSON))
	for i, b := range processJSON {
		procs[i] = encoded{sum: sha256.Sum256(b), json: b}
	}
	codec, _ := codecOfProcess() // without a codec, every record is JSON
	if codec != nil {
		_ = s.parallel(len(procs), func(i int) error {
			procs[i].bin = codec.encode(&snap.Processes[i])
			return nil
		})
	}
	header := *snap
	header.Processes = nil
	hb, err := json.Marshal(&header)
	if err != nil {
		return fmt.Errorf("store: encode snapshot: %w", err)
	}
	mb, err := json.Marshal(tlog.MetaOf(snap))
	if err != nil {
		return fmt.Errorf("store: encode snapshot: %w", err)
	}
	sums := make([][sha256.Size]byte, len(procs))
	for i := range procs {
		sums[i] = procs[i].sum
	}
	put := tlog.Leaf{Op: tlog.OpPut, Snapshots: []tlog.LeafSnapshot{{ID: snap.ID, Digest: tlog.SnapshotDigest(mb, hb, sums, snap.Processes == nil)}}}
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
		// The log is opened before anything is written, so a log that begins
		// here adopts what was stored before, not this snapshot.
		log, err := s.openLog(tx)
		if err != nil {
			return err
		}
		for _, bk := range []*bolt.Bucket{meta, snaps, refs, procsB} {
			bk.FillPercent = fillSequential
		}
		w := &recordWriter{s: s, tx: tx, codec: codec, procs: procsB, hashes: hashes}
		seqs := make([]uint64, len(procs))
		for i, p := range procs {
			if seqs[i], err = w.put(p.sum, p.json, p.bin); err != nil {
				return err
			}
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

// recordWriter stores the process records of one Put.
type recordWriter struct {
	s             *Store
	tx            *bolt.Tx
	codec         *processCodec // nil when records are stored as JSON
	procs, hashes *bolt.Bucket
	recs          *records
	typ           uint64 // today's record type in the store, 0 until needed
}

// put stores the process whose JSON hashes to sum, or finds it stored, and
// returns its record's sequence number.
func (w *recordWriter) put(sum [sha256.Size]byte, js, bin []byte) (uint64, error) {
	if w.recs == nil {
		w.recs = newRecords(w.tx, w.procs)
	}
	if w.codec != nil && w.typ == 0 {
		var err error
		if w.typ, err = typeID(w.tx, w.codec.desc); err != nil {
			return 0, err
		}
		w.recs.types = w.tx.Bucket(bucketTypes)
	}
	if v := w.hashes.Get(sum[:]); v != nil {
		if len(v) != 8 {
			return 0, w.s.damaged("process hash index entry of %d bytes", len(v))
		}
		seq := binary.BigEndian.Uint64(v)
		return seq, w.reuse(seq, sum, js, bin)
	}
	seq, err := w.procs.NextSequence()
	if err != nil {
		return 0, err
	}
	stored := encodeRecord(js)
	if w.codec != nil {
		stored = w.codec.storedForm(bin, js, w.typ)
	}
	rec := append(append(make([]byte, 0, sha256.Size+len(stored)), sum[:]...), stored...)
	if err := w.procs.Put(seqKey(seq), rec); err != nil {
		return 0, err
	}
	return seq, w.hashes.Put(sum[:], seqKey(seq))
}

// reuse checks that record seq, found by its hash, still matches that hash,
// because a corrupt record reused would spoil every later snapshot. A binary
// record of today's type is checked by its bytes, any other by its JSON. A
// schema 1 record is rewritten in binary with its hash unchanged, so an
// unchanged host's records upgrade as it goes.
func (w *recordWriter) reuse(seq uint64, sum [sha256.Size]byte, js, bin []byte) error {
	rec, missing, err := w.recs.get(seq)
	switch {
	case missing:
		return w.s.damaged("process record %d, indexed by its hash, is missing", seq)
	case err == nil && rec.sum != sum:
		err = errors.New("its hash is not the index's")
	case err == nil && rec.dec != nil && rec.typ == w.typ && bytes.Equal(rec.bin, bin):
		return nil
	case err == nil:
		_, err = rec.appendJSON(nil)
	}
	if err != nil {
		return w.s.damaged("process record %d does not match its hash: %v", seq, err)
	}
	if rec.dec != nil || w.codec == nil {
		return nil
	}
	stored := w.codec.storedForm(bin, js, w.typ)
	if stored[0] != formBinary && stored[0] != formBinaryDeflate {
		return nil
	}
	return w.procs.Put(seqKey(seq), append(append(make([]byte, 0, sha256.Size+len(stored)), sum[:]...), stored...))
}

// Get loads a snapshot by its full id or any unique prefix.
func (s *Store) Get(idOrPrefix string) (*snapshot.Snapshot, error) {
	return s.GetSelected(idOrPrefix, "", nil)
}

// GetSelected loads a snapshot with only the processes keep accepts (all when
// keep is nil). When text is not empty, only records that contain it are
// decoded, since decoding is most of a load's cost. Every process keep
// accepts must hold text, which must be letters, digits, '-', '_' or '/' so
// that JSON and binary records hold it verbatim.
func (s *Store) GetSelected(idOrPrefix, text string, keep func(*snapshot.Process) bool) (*snapshot.Snapshot, error) {
	var snap *snapshot.Snapshot
	err := s.view(func(tx *bolt.Tx) error {
		id, err := s.resolve(tx, idOrPrefix)
		if err != nil {
			return err
		}
		snap, err = s.load(tx, id, []byte(text), keep)
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

// record is a stored snapshot as read, the header's JSON and each process
// record, in order. procs is nil for a snapshot whose process list was nil.
// The records may alias bbolt's mmap, so they are valid inside the
// transaction only.
type record struct {
	header []byte
	procs  []storedRec
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
	// listed twice is damage, and a crafted list of one record a million
	// times would otherwise cost a million decodes. The list is sorted, not
	// put in a set, as it is mostly in order already and a set of thousands
	// costs more.
	sorted := slices.Clone(seqs)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return r, s.damaged("snapshot %s: process record %d is listed twice", id, sorted[i])
		}
	}
	recs := newRecords(tx, b[2])
	r.procs = make([]storedRec, len(seqs))
	for i, seq := range seqs {
		var missing bool
		r.procs[i], missing, err = recs.get(seq)
		switch {
		case missing:
			return r, s.damaged("snapshot %s: process record %d is missing", id, seq)
		case err != nil:
			return r, s.damaged("snapshot %s: process record %d: %v", id, seq, err)
		}
	}
	return r, nil
}

// mentions reports whether a record's stored bytes hold text.
func (r *storedRec) mentions(text []byte) bool {
	if r.dec == nil {
		return bytes.Contains(r.json, text)
	}
	return bytes.Contains(r.bin, text)
}

// load reads snapshot id, its header and then each process record it
// references that mentions text (all when text is empty) and keep accepts.
func (s *Store) load(tx *bolt.Tx, id string, text []byte, keep func(*snapshot.Process) bool) (*snapshot.Snapshot, error) {
	snaps, err := s.loadShared(tx, []string{id}, text, false)
	if err != nil {
		return nil, err
	}
	snap := snaps[0]
	if keep != nil && snap.Processes != nil {
		snap.Processes = slices.DeleteFunc(snap.Processes, func(p snapshot.Process) bool { return !keep(&p) })
	}
	return snap, nil
}

// GetShared loads several snapshots, by full id or unique prefix, in one
// transaction, decoding a record they share once, so two snapshots of an
// unchanged host cost about one load. A process in several is one value
// copied, and equal lists (a cgroup, a command line) may be one list, which
// the caller must not change (diff changes nothing).
func (s *Store) GetShared(idsOrPrefixes ...string) ([]*snapshot.Snapshot, error) {
	var snaps []*snapshot.Snapshot
	err := s.view(func(tx *bolt.Tx) error {
		ids := make([]string, len(idsOrPrefixes))
		for i, p := range idsOrPrefixes {
			var err error
			if ids[i], err = s.resolve(tx, p); err != nil {
				return err
			}
		}
		var err error
		snaps, err = s.loadShared(tx, ids, nil, true)
		return err
	})
	return snaps, err
}

// loadShared reads snapshots ids, their process records that mention text
// (all when text is empty), decoding each distinct record once. With share,
// processes may share lists (decodeProcesses).
func (s *Store) loadShared(tx *bolt.Tx, ids []string, text []byte, share bool) ([]*snapshot.Snapshot, error) {
	snaps := make([]*snapshot.Snapshot, len(ids))
	lists := make([][]storedRec, len(ids))
	total := 0
	for i, id := range ids {
		r, err := s.record(tx, id)
		if err != nil {
			return nil, err
		}
		if len(text) > 0 && r.procs != nil {
			r.procs = slices.DeleteFunc(r.procs, func(p storedRec) bool { return !p.mentions(text) })
		}
		snaps[i] = new(snapshot.Snapshot)
		if err := json.Unmarshal(r.header, snaps[i]); err != nil {
			return nil, s.damaged("snapshot %s: %v", id, err)
		}
		lists[i] = r.procs
		total += len(r.procs)
	}
	// unique points at the first listing of each distinct record, owner
	// names the snapshot of that listing (for damage reports), and at is
	// each record's place in unique. They hold pointers and are sized once,
	// as a snapshot of thousands of records copied there grew and copied
	// them again.
	unique := make([]*storedRec, 0, total)
	owner := make([]int, 0, total)
	var at map[uint64]int
	if len(ids) > 1 {
		at = make(map[uint64]int, len(lists[0]))
	}
	for i, list := range lists {
		for j := range list {
			p := &list[j]
			if at != nil { // one snapshot lists a record once (record)
				if _, dup := at[p.seq]; dup {
					continue
				}
				at[p.seq] = len(unique)
			}
			unique, owner = append(unique, p), append(owner, i)
		}
	}
	detach(unique)
	decoded := make([]snapshot.Process, len(unique))
	if err := s.decodeProcesses(unique, decoded, share); err != nil {
		var d *decodeError
		if errors.As(err, &d) { // the one-line form `store FILE is damaged: ...`
			return nil, s.damaged("snapshot %s: process record %d: %v", ids[owner[d.at]], unique[d.at].seq, d.err)
		}
		return nil, err
	}
	for i, list := range lists {
		switch {
		case list == nil:
		case i == 0: // the first snapshot's records are the first decoded, in its order
			snaps[i].Processes = decoded[:len(list):len(list)]
		default:
			snaps[i].Processes = make([]snapshot.Process, len(list))
			for j, p := range list {
				snaps[i].Processes[j] = decoded[at[p.seq]]
			}
		}
	}
	return snaps, nil
}

// nullProcesses is how the header, stored without its processes, ends its
// processes field. No other raw `"processes":null` can precede it, since
// quotes inside JSON strings are escaped, and no map comes before it in
// Snapshot.
var nullProcesses = []byte(`"processes":null`)

// GetJSON returns a snapshot's JSON byte for byte as json.Marshal made it of
// the Snapshot given to Put, which marshalling Get's result may not be
// (invalid UTF-8 reads back as U+FFFD). show --json prints it, so it matches
// what snapshot --json printed, and each record is checked against its stored
// JSON hash. It comes in parts. head is the snapshot with `"processes":null`
// for its processes, or all of it when procs is nil. procs are the processes
// in order, in as many parts as CPUs, each process's JSON appended to its
// part by add, so a caller reformatting them does so on every CPU and
// without a copy of the whole (docs/performance-notes.md, "show --json at
// 2x show").
func (s *Store) GetJSON(idOrPrefix string, add func(part, process []byte) []byte) (head []byte, procs [][]byte, err error) {
	err = s.view(func(tx *bolt.Tx) error {
		id, err := s.resolve(tx, idOrPrefix)
		if err != nil {
			return err
		}
		r, err := s.record(tx, id)
		if err != nil {
			return err
		}
		// The processes' JSON is json.Marshal's own output and the header is
		// what the store read, so show --json indents it without a second
		// validating scan.
		if !json.Valid(r.header) {
			return s.damaged("snapshot %s: header is not JSON", id)
		}
		head = r.header
		if r.procs == nil {
			return nil
		}
		at := bytes.Index(r.header, nullProcesses)
		if at < 0 {
			return s.damaged("snapshot %s: header has no processes field", id)
		}
		if len(r.procs) == 0 {
			head = slices.Concat(r.header[:at], []byte(`"processes":[]`), r.header[at+len(nullProcesses):])
			return nil
		}
		parts := min(runtime.GOMAXPROCS(0), len(r.procs))
		procs = make([][]byte, parts)
		return s.parallel(parts, func(w int) error {
			recs := r.procs[w*len(r.procs)/parts : (w+1)*len(r.procs)/parts]
			var err error
			if procs[w], err = processesJSON(recs, add); err != nil {
				var d *decodeError
				errors.As(err, &d)
				return s.damaged("snapshot %s: process record %d: %v", id, recs[d.at].seq, d.err)
			}
			return nil
		})
	})
	if err != nil {
		return nil, nil, err
	}
	return head, procs, nil
}

// processesJSON is the JSON of recs, each process appended by add, in one
// buffer sized once where it can be, as growing it copied it and faulted in
// its pages twice (docs/performance-notes.md, "show --json at 2x show"). A
// record whose JSON does not match its hash is a decodeError.
func processesJSON(recs []storedRec, add func(part, process []byte) []byte) ([]byte, error) {
	left := 0
	for i := range recs {
		left += recs[i].size()
	}
	// Pages the buffer's end never reaches are never faulted in, so room for
	// more than is made costs nothing.
	out := make([]byte, 0, 4*left)
	var one []byte // a process's JSON, reused
	read := 0
	for i := range recs {
		// Room for what is left at the ratio so far, with an eighth more.
		if read > 0 {
			if need := left * len(out) / read * 9 / 8; cap(out)-len(out) < need {
				out = slices.Grow(out, need)
			}
		}
		var err error
		if one, err = recs[i].appendJSON(one[:0]); err != nil {
			return nil, &decodeError{at: i, err: err}
		}
		out = add(out, one)
		n := recs[i].size()
		read, left = read+n, left-n
	}
	return out, nil
}

// size is how many bytes the record holds.
func (r *storedRec) size() int { return len(r.bin) + len(r.json) }

// decodeProcesses decodes the records on every CPU. A record that does not
// decode is a decodeError. With share, a worker reuses the list of its
// previous record where the bytes are the same (decodeShared), so a diff
// of two large snapshots allocates less (docs/performance.md, The store).
func (s *Store) decodeProcesses(recs []*storedRec, out []snapshot.Process, share bool) error {
	workers := min(runtime.GOMAXPROCS(0), len(recs))
	return s.parallel(workers, func(w int) error {
		var lists map[*desc]sharedList
		if share {
			lists = map[*desc]sharedList{}
		}
		for i := w; i < len(recs); i += workers {
			if err := recs[i].decode(&out[i], lists); err != nil {
				return &decodeError{at: i, err: err}
			}
		}
		return nil
	})
}

// decodeError is record at's failure to decode.
type decodeError struct {
	at  int
	err error
}

func (e *decodeError) Error() string { return e.err.Error() }

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
		snap, err = s.load(tx, id, nil, nil)
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
