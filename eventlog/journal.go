package eventlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// The event log is a directory DB.events beside the store, of segments of one
// JSON event a line, appended to by watch alone. Watch never takes the
// store's lock, so it never waits on other commands. Readers take no lock
// either, since each line is one O_APPEND write(2) and an unfinished last
// line is not read.

const (
	segmentSuffix = ".jsonl"
	// segmentLimit starts a new segment past this size, so retention drops
	// whole files and a reader skips the ones before --since unread.
	segmentLimit = 64 << 20
	// maxLine bounds one event's line. Larger ones are not events watch wrote.
	maxLine = 64 << 10
	// segmentTimeLayout names a segment by when it was started, so names sort by time.
	segmentTimeLayout = "20060102T150405.000000000Z"
)

// JournalDir is the event log of the store at dbPath.
func JournalDir(dbPath string) string { return dbPath + ".events" }

// Dir is the directory of the log.
func (j *Journal) Dir() string { return j.dir }

// Journal appends events to the event log. One watch at a time holds it.
type Journal struct {
	dir  string
	lock *os.File
	seg  *os.File
	size int64
	buf  bytes.Buffer
	// ends are the offsets in buf after each record, and chains the chain
	// after each, so a short write is cut back to the last whole record.
	ends   []int
	chains []chain
	chain  chain
	// start is the watch_start record of this watch. A segment started for
	// size begins with it again (head), so a reader of that segment alone
	// knows the watch was running (Gaps).
	start *Event
	head  bool
}

// ErrWatchRunning is returned by OpenJournal when another watch holds the log.
var ErrWatchRunning = errors.New("another gpusnap watch is recording into this event log")

// OpenJournal opens the event log in dir for appending, creating it (0700)
// where missing, and starts a new segment.
func OpenJournal(dir string) (*Journal, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("event log %s: %w", dir, err)
	}
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("event log %s: %w", dir, err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("event log %s: %w", dir, ErrWatchRunning)
	}
	j := &Journal{dir: dir, lock: lock}
	if err := j.rotate(time.Now()); err != nil {
		j.Close()
		return nil, err
	}
	return j, nil
}

// checkDir refuses an event log directory that is a symbolic link or that
// another user could write to, since it holds command lines and who ran
// what.
func checkDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("event log %s: %w", dir, err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("event log %s is not a directory", dir)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("event log %s is writable by other users (mode %s)", dir, fi.Mode().Perm())
	case st != nil && int(st.Uid) != os.Geteuid():
		return fmt.Errorf("event log %s is owned by uid %d, not this user", dir, st.Uid)
	}
	return nil
}

// rotate starts a new segment named by t, with a chain of its own.
func (j *Journal) rotate(t time.Time) error {
	if j.seg != nil {
		if err := j.seg.Close(); err != nil {
			return fmt.Errorf("event log %s: %w", j.dir, err)
		}
	}
	name := filepath.Join(j.dir, t.UTC().Format(segmentTimeLayout)+segmentSuffix)
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("event log: %w", err)
	}
	j.seg, j.size, j.chain.prev = f, 0, [32]byte{}
	return nil
}

// Append writes events, each with its seq and hash, in one write and syncs
// them. It returns how many are in the log. On a short write (a full disk) it
// cuts the segment back to the last whole record, so no line is torn and a
// later call appends the rest with the same seq and chain.
func (j *Journal) Append(events []Event) (int, error) {
	if len(events) == 0 {
		return 0, nil
	}
	if j.start == nil && events[0].Kind == KindWatchStart {
		start := events[0]
		j.start = &start
	}
	if err := j.encode(events); err != nil {
		return 0, err
	}
	if j.size > 0 && j.size+int64(j.buf.Len()) > segmentLimit {
		if err := j.rotate(events[0].Time); err != nil {
			return 0, err
		}
		j.head = j.start != nil // with the same start time, Gaps reads it as a continuation
		if err := j.encode(events); err != nil {
			return 0, err
		}
	}
	n, err := j.seg.Write(j.buf.Bytes())
	if err == nil {
		j.commit(len(j.ends))
		if err = j.seg.Sync(); err != nil {
			err = fmt.Errorf("event log %s: %w", j.seg.Name(), err)
		}
		return len(events), err
	}
	whole, _ := slices.BinarySearch(j.ends, n+1) // the records that end within the n bytes written
	kept, heads := 0, 0
	if whole > 0 {
		kept = j.ends[whole-1]
	}
	if j.head {
		heads = 1
	}
	var terr error
	if n > kept {
		terr = j.seg.Truncate(j.size + int64(kept))
	}
	j.commit(whole)
	err = fmt.Errorf("event log %s: %w", j.seg.Name(), err)
	if terr != nil {
		// The torn line stays behind in a segment of its own past, where a
		// reader counts it as damaged.
		err = fmt.Errorf("%w (and cutting its torn record failed: %v)", err, terr)
		if rerr := j.rotate(time.Now()); rerr != nil {
			err = fmt.Errorf("%w; %v", err, rerr)
		}
		j.head = j.start != nil
	}
	return max(whole-heads, 0), err
}

// commit takes the first k records of buf as written.
func (j *Journal) commit(k int) {
	if k == 0 {
		return
	}
	j.size += int64(j.ends[k-1])
	j.chain = j.chains[k-1]
	j.head = false
}

// encode writes into buf the head (if due) and events, sealed from the
// current chain on.
func (j *Journal) encode(events []Event) error {
	j.buf.Reset()
	j.ends, j.chains = j.ends[:0], j.chains[:0]
	c := j.chain
	var line bytes.Buffer
	enc := json.NewEncoder(&line)
	enc.SetEscapeHTML(false)
	add := func(e Event) error {
		c.seq++
		e.Seq = c.seq
		line.Reset()
		if err := enc.Encode(&e); err != nil {
			return fmt.Errorf("event log: encode: %w", err)
		}
		c.seal(&j.buf, line.Bytes())
		j.ends, j.chains = append(j.ends, j.buf.Len()), append(j.chains, c)
		return nil
	}
	if j.head {
		if err := add(*j.start); err != nil {
			return err
		}
	}
	for i := range events {
		if err := add(events[i]); err != nil {
			return err
		}
	}
	return nil
}

// Prune removes the segments whose events all precede before.
func (j *Journal) Prune(before time.Time) error {
	segs, err := segments(j.dir)
	if err != nil {
		return err
	}
	for i := 0; i+1 < len(segs); i++ {
		if segs[i+1].start.Before(before) && segs[i].path != j.seg.Name() {
			if err := os.Remove(segs[i].path); err != nil {
				return fmt.Errorf("event log: %w", err)
			}
		}
	}
	return nil
}

// Close closes the segment and lets another watch take the log.
func (j *Journal) Close() error {
	var err error
	if j.seg != nil {
		err = j.seg.Close()
	}
	if j.lock != nil {
		j.lock.Close()
	}
	return err
}

type segment struct {
	path  string
	start time.Time
}

// segments lists the segments of dir in time order.
func segments(dir string) ([]segment, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("event log: %w", err)
	}
	var out []segment
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, segmentSuffix) || !e.Type().IsRegular() {
			continue
		}
		t, err := time.Parse(segmentTimeLayout, strings.TrimSuffix(name, segmentSuffix))
		if err != nil {
			continue
		}
		out = append(out, segment{filepath.Join(dir, name), t})
	}
	slices.SortFunc(out, func(a, b segment) int { return a.start.Compare(b.start) })
	return out, nil
}

// ReadResult is what ReadEvents found.
type ReadResult struct {
	Events []Event
	// Before is the last watch_start or watch_stop before since, which says
	// whether a watch was recording when the window began.
	Before *Event
	// Damaged counts lines that are not events (a torn last line of a watch
	// killed mid-write, a line too long, a segment that cannot be read).
	// They are said on stderr, never hidden.
	Damaged int
	// Broken counts records that break their segment's chain, being
	// removed, edited, reordered or re-timed (see chain.go).
	Broken int
	// Faults name the first damaged lines and broken records, by segment,
	// line and seq.
	Faults []Fault
	// Unchained counts records without seq and hash, written before the log
	// had its chain, so nothing says whether they were changed.
	Unchained int
	// Heads are where the chain of each segment read stood at its end (the
	// last maxHeads of them), which a diff seals into the store's log.
	Heads []Head
}

// ErrNoLog is returned by ReadEvents when the store has no event log,
// because watch never ran with it.
var ErrNoLog = errors.New("no event log")

// ReadEvents reads the events of the log in dir with since <= time < until
// (zero for unbounded), in the order written, and holds them all, so a
// window a tenant may fill is walked with OpenWindow instead. Every line
// read is checked, and one that is no event or breaks its chain is counted
// and named in the result.
func ReadEvents(dir string, since, until time.Time) (ReadResult, error) {
	var r ReadResult
	err := walk(dir, since, until, &r, func(e *Event) bool {
		r.Events = append(r.Events, *e)
		return true
	})
	return r, err
}

// walk reads the segments of dir that overlap [since, until), checks every
// line, notes in r what ReadResult says of them (all but Events), and hands
// fn each event of the window, in the order written, until fn returns false.
func walk(dir string, since, until time.Time, r *ReadResult, fn func(*Event) bool) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w at %s (gpusnap watch writes it)", ErrNoLog, dir)
	}
	segs, err := segments(dir)
	if err != nil {
		return err
	}
	var v verifier
	known := false
	for i, seg := range segs {
		if !until.IsZero() && !seg.start.Before(until) {
			break
		}
		// A segment ends where the next begins, so one wholly before since is skipped unread.
		if i+1 < len(segs) && !since.IsZero() && segs[i+1].start.Before(since) {
			known = false
			continue
		}
		v.begin(filepath.Base(seg.path), known)
		known = true
		more, err := readSegment(seg.path, since, until, i == len(segs)-1, &v, r, fn)
		if err != nil {
			v.line = 0
			v.damaged(r, "the segment cannot be read: "+err.Error())
		} else if more {
			v.end(r)
		}
		if !more {
			break
		}
	}
	return nil
}

// readSegment reads one segment for walk. more is false once fn asked to
// stop, and the error says why the segment could not be read (whole or to
// its end).
func readSegment(path string, since, until time.Time, last bool, v *verifier, r *ReadResult, fn func(*Event) bool) (more bool, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return true, nil // pruned while we listed
		}
		return true, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return true, errors.New("not a regular file")
	}
	br := bufio.NewReaderSize(f, 256<<10)
	for {
		line, err := br.ReadSlice('\n')
		v.line++
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line too long to be an event is skipped to the next newline.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			v.damaged(r, "a line over 256 KiB")
			if err == nil {
				continue
			}
		}
		if errors.Is(err, io.EOF) {
			if len(line) > 0 && !last {
				v.damaged(r, "a torn last line (a watch that died mid-write)") // in the last segment it may be being written now
			}
			return true, nil
		}
		if err != nil {
			return true, err
		}
		if len(line) > maxLine {
			v.damaged(r, "a line over 64 KiB")
			continue
		}
		line = line[:len(line)-1]
		var e Event
		if json.Unmarshal(line, &e) != nil || e.Kind == "" {
			v.damaged(r, "not an event")
			continue
		}
		v.check(r, line, &e)
		if !since.IsZero() && e.Time.Before(since) {
			if e.Kind == KindWatchStart || e.Kind == KindWatchStop {
				r.Before = &e
			}
			continue
		}
		if !until.IsZero() && !e.Time.Before(until) {
			continue
		}
		if !fn(&e) {
			return false, nil
		}
	}
}
