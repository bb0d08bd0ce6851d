package eventlog

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The log's integrity (docs/watch.md) rests on a chain. Each record carries
// seq, its count in its watch, and last a hash, the hex SHA-256 of the
// previous record's hash (zeros for a segment's first) and its own line less
// the hash. Removing, editing, reordering or re-timing a record breaks the
// chain there. The chain is no signature, but no record can be changed
// alone.

// hashField opens the hash, the last field of a chained line.
const hashField = `,"hash":"`

// hashTail is the length of the hash field and the closing brace that
// follows it on a chained line, as in `,"hash":"<64 hex>"}`.
const hashTail = len(hashField) + 2*sha256.Size + 2

// chain is the writer's state of a segment's chain.
type chain struct {
	prev [sha256.Size]byte // the hash of the segment's last record, zero at its start
	seq  uint64            // the seq of the watch's last record
}

// seal appends line, one record's JSON without its hash field and ending in
// "}\n", to buf with the hash that chains it, and advances c.
func (c *chain) seal(buf *bytes.Buffer, line []byte) {
	body := line[:len(line)-2] // without "}\n"
	h := sha256.New()
	h.Write(c.prev[:])
	h.Write(body)
	h.Write([]byte{'}'})
	h.Sum(c.prev[:0])
	buf.Write(body)
	buf.WriteString(hashField)
	var hexed [2 * sha256.Size]byte
	hex.Encode(hexed[:], c.prev[:])
	buf.Write(hexed[:])
	buf.WriteString(`"}` + "\n")
}

// Fault is a line of the log that a reader cannot take as written by watch,
// either not an event (torn, damaged, unreadable) or one that breaks its
// segment's chain (a record removed, edited, reordered or re-timed).
type Fault struct {
	Segment string    `json:"segment"` // the segment's file name
	Line    int       `json:"line"`    // from 1, or 0 for the segment as a whole
	Seq     uint64    `json:"seq,omitempty"`
	Time    time.Time `json:"time,omitzero"`
	Why     string    `json:"why"`
}

// String says the fault in one line.
func (f Fault) String() string {
	s := fmt.Sprintf("%s line %d", f.Segment, f.Line)
	if f.Seq > 0 {
		s += fmt.Sprintf(" (seq %d)", f.Seq)
	}
	return s + ": " + f.Why
}

// maxFaults bounds the faults a read names. The rest are counted.
const maxFaults = 64

// Head is where a segment's chain stood when a reader read it, by its last
// chained record's line (from 1), seq and hex hash. A diff seals its window's
// heads into the store's log (docs/store.md), so that a segment removed or
// rewritten up to Line no longer matches its head (CheckHead).
type Head struct {
	Segment string `json:"segment"`
	Line    int    `json:"line"`
	Seq     uint64 `json:"seq"`
	Hash    string `json:"hash"`
}

// maxHeads bounds the heads one read keeps to the last segments of a window
// (64 of at most 64 MiB each). The earlier ones are not sealed.
const maxHeads = 64

// verifier checks the chains of the segments one read goes through.
type verifier struct {
	seg     string
	line    int
	prev    [sha256.Size]byte
	chained bool   // the segment has held a chained record
	resync  bool   // the line before was no event, so the next record's hash has no base
	lastSeq uint64 // the last record's seq, carried into the next segment, or 0 when unknown
	head    Head   // the segment's last chained record so far (Line 0 when none)
}

// begin starts a segment. known says the segment before it was read, so
// that the seq of this one's first record can be checked against it.
func (v *verifier) begin(seg string, known bool) {
	v.seg, v.line, v.prev, v.chained, v.resync, v.head = seg, 0, [sha256.Size]byte{}, false, false, Head{}
	if !known {
		v.lastSeq = 0
	}
}

// damaged notes that the current line is no event.
func (v *verifier) damaged(r *ReadResult, why string) {
	r.Damaged++
	r.addFault(Fault{Segment: v.seg, Line: v.line, Why: why})
	v.resync = true
}

// check verifies the record e read from line (without its newline) against
// the chain, and notes in r where it breaks.
func (v *verifier) check(r *ReadResult, line []byte, e *Event) {
	stated, body, ok := splitHash(line)
	if !ok && e.Seq == 0 {
		r.Unchained++
		if v.chained {
			v.broken(r, e, "a record without seq or hash inside a chained segment (inserted, or its chain stripped)")
		}
		return
	}
	var why []string
	if !ok {
		why = append(why, "its hash is missing or malformed (edited)")
	} else {
		h := sha256.New()
		h.Write(v.prev[:])
		h.Write(body)
		h.Write([]byte{'}'})
		var sum [sha256.Size]byte
		h.Sum(sum[:0])
		if !v.resync && sum != stated {
			what := "the record was edited or re-timed, or one before it removed or moved"
			if !v.chained && v.line > 1 {
				what = "the record was edited, or chained records before it removed"
			}
			why = append(why, "hash does not chain: "+what)
		}
		v.prev = stated // one edit is one fault, as the next record chains to what this one says
		v.head = Head{Segment: v.seg, Line: v.line, Seq: e.Seq, Hash: hex.EncodeToString(stated[:])}
	}
	switch {
	case e.Seq == 0:
		why = append(why, "no seq")
	case v.lastSeq != 0 && e.Seq != 1 && e.Seq != v.lastSeq+1 && !v.resync:
		why = append(why, fmt.Sprintf("seq %d follows %d: records removed or reordered", e.Seq, v.lastSeq))
	}
	v.chained, v.resync = true, false
	if e.Seq != 0 {
		v.lastSeq = e.Seq
	}
	if len(why) > 0 {
		v.broken(r, e, strings.Join(why, "; "))
	}
}

func (v *verifier) broken(r *ReadResult, e *Event, why string) {
	r.Broken++
	r.addFault(Fault{Segment: v.seg, Line: v.line, Seq: e.Seq, Time: e.Time, Why: why})
}

// splitHash takes the hash field off a chained line. It returns the hash the
// line states and the line without it, up to (not including) its closing
// brace.
func splitHash(line []byte) (stated [sha256.Size]byte, body []byte, ok bool) {
	n := len(line) - hashTail
	if n < 1 || !bytes.HasPrefix(line[n:], []byte(hashField)) || !bytes.HasSuffix(line, []byte(`"}`)) {
		return stated, nil, false
	}
	if _, err := hex.Decode(stated[:], line[n+len(hashField):len(line)-2]); err != nil {
		return stated, nil, false
	}
	return stated, line[:n], true
}

// end notes in r where the segment's chain stood at its end.
func (v *verifier) end(r *ReadResult) {
	if v.head.Line == 0 {
		return
	}
	if len(r.Heads) == maxHeads {
		r.Heads = append(r.Heads[:0], r.Heads[1:]...)
	}
	r.Heads = append(r.Heads, v.head)
}

// CheckHeads reports, for each head, whether its segment in dir still holds
// its first Line lines as written, each a chained event and line Line with
// the head's seq and hash. errs[i] is nil where heads[i] holds and says what
// changed where not, wrapping ErrSegmentGone for a segment that is gone. Each
// segment is read once.
func CheckHeads(dir string, heads []Head) (errs []error) {
	errs = make([]error, len(heads))
	bySeg := map[string][]int{}
	for i, h := range heads {
		if filepath.Base(h.Segment) != h.Segment || !strings.HasSuffix(h.Segment, segmentSuffix) || h.Line < 1 {
			errs[i] = fmt.Errorf("%q line %d is no place in an event log", h.Segment, h.Line)
			continue
		}
		bySeg[h.Segment] = append(bySeg[h.Segment], i)
	}
	for seg, idx := range bySeg {
		slices.SortFunc(idx, func(a, b int) int { return heads[a].Line - heads[b].Line })
		checkSegment(dir, seg, heads, idx, errs)
	}
	return errs
}

// checkSegment checks the heads idx (in line order) of one segment for
// CheckHeads.
func checkSegment(dir, seg string, heads []Head, idx []int, errs []error) {
	path := filepath.Join(dir, seg)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		for _, i := range idx {
			errs[i] = fmt.Errorf("segment %s: %w", seg, ErrSegmentGone)
		}
		return
	}
	var v verifier
	var r ReadResult
	v.begin(seg, false)
	next := 0
	check := func(e *Event) {
		for next < len(idx) && heads[idx[next]].Line <= v.line {
			h := heads[idx[next]]
			switch {
			case r.Damaged+r.Broken > 0:
				errs[idx[next]] = fmt.Errorf("segment %s was changed at or before line %d: %s", seg, h.Line, r.Faults[0].String())
			case e == nil || v.line != h.Line:
				errs[idx[next]] = fmt.Errorf("segment %s line %d is no longer the record sealed there: truncated or rewritten", seg, h.Line)
			case e.Seq != h.Seq || v.head.Hash != h.Hash:
				errs[idx[next]] = fmt.Errorf("segment %s line %d holds seq %d hash %s, sealed as seq %d hash %s: rewritten", seg, h.Line, e.Seq, v.head.Hash, h.Seq, h.Hash)
			}
			next++
		}
	}
	_, err := readSegment(path, time.Time{}, time.Time{}, true, &v, &r, func(e *Event) bool {
		check(e)
		return next < len(idx)
	})
	for ; next < len(idx); next++ {
		h := heads[idx[next]]
		why := fmt.Sprintf("holds %d lines: truncated or rewritten", max(v.line-1, 0)) // the last read was its end
		if err != nil {
			why = "cannot be read: " + err.Error()
		}
		errs[idx[next]] = fmt.Errorf("segment %s, sealed at line %d, %s", seg, h.Line, why)
	}
}

// SegmentStart is when the segment named name was started, from its name.
func SegmentStart(name string) (time.Time, bool) {
	t, err := time.Parse(segmentTimeLayout, strings.TrimSuffix(name, segmentSuffix))
	return t, err == nil && strings.HasSuffix(name, segmentSuffix)
}

// ErrSegmentGone says a sealed segment is no longer in the log.
var ErrSegmentGone = errors.New("the segment is gone")

func (r *ReadResult) addFault(f Fault) {
	if len(r.Faults) < maxFaults {
		r.Faults = append(r.Faults, f)
	}
}
