package eventlog

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// A reader that needs the log to reach an instant (a diff's TO) asks the
// running watch for a record. It writes the flush request file in the log's
// directory, and the watch, which looks at the file's modification time at
// each flush, writes a heartbeat at once. Nothing reads the file's content.
const flushRequestName = ".flush-request"

// RequestFlush asks a running watch of the log in dir to write a record
// now. The log's directory is checked as the journal checks it, and the
// request is never written through a link.
func RequestFlush(dir string) error {
	if err := checkDir(dir); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, flushRequestName), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(strconv.FormatInt(time.Now().UnixNano(), 10) + "\n") // the write moves the modification time
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// FlushRequests tells a watch when a reader asked it for a record.
type FlushRequests struct {
	path string
	last time.Time
}

// WatchFlushRequests starts looking for requests in the log of j. A request
// made before now is not one.
func (j *Journal) WatchFlushRequests() *FlushRequests {
	r := &FlushRequests{path: filepath.Join(j.dir, flushRequestName)}
	r.Asked()
	return r
}

// Asked reports whether a reader asked for a record since the last call.
func (r *FlushRequests) Asked() bool {
	fi, err := os.Lstat(r.path)
	if err != nil || !fi.Mode().IsRegular() || !fi.ModTime().After(r.last) {
		return false
	}
	r.last = fi.ModTime()
	return true
}

// tailBytes is how much of the last segment tail reads, enough for its last
// records.
const tailBytes = 256 << 10

// DefaultFlushWait is how long a diff or check waits for the log to reach
// its TO. A watch asked for a record writes one within its flush interval
// (200 ms), and a loaded host gets ten times that.
const DefaultFlushWait = 2 * time.Second

// tail reads the last records of the log in dir. It reports whether one is
// at or after t, and the kind of the last one ("" where none could be read).
func tail(dir string, t time.Time) (reached bool, lastKind string, err error) {
	segs, err := segments(dir)
	if err != nil || len(segs) == 0 {
		return false, "", err
	}
	last := segs[len(segs)-1]
	f, err := os.OpenFile(last.path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, "", fmt.Errorf("event log: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return false, "", fmt.Errorf("event log: %s is not a regular file", last.path)
	}
	if off := fi.Size() - tailBytes; off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return false, "", fmt.Errorf("event log: %w", err)
		}
	}
	sc := bufio.NewScanner(io.LimitReader(f, tailBytes))
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	for sc.Scan() { // a line past maxLine ends the scan, as it is no record
		var rec struct {
			Time time.Time `json:"time"`
			Kind string    `json:"kind"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Kind != "" {
			reached = reached || !rec.Time.Before(t)
			lastKind = rec.Kind
		}
	}
	return reached, lastKind, nil
}

// WaitReached waits, up to wait, until the log in dir holds a record at or
// after t, having asked the running watch for one (RequestFlush). It
// returns the problem when none came. It returns nil when one did, or when
// the log's last record is a watch's stop, since no watch runs to ask and
// the coverage's gap says so.
func WaitReached(dir string, t time.Time, wait time.Duration) *Problem {
	asked := RequestFlush(dir)
	deadline := time.Now().Add(wait)
	for {
		reached, last, err := tail(dir, t)
		switch {
		case err != nil:
			return &Problem{ProblemNoLog, "the end of the event log cannot be read: " + err.Error()}
		case reached || last == KindWatchStop:
			return nil
		case !time.Now().Before(deadline):
			why := "no watch wrote one"
			if asked != nil {
				why = "the running watch could not be asked for one: " + asked.Error()
			}
			return &Problem{ProblemUnflushed, fmt.Sprintf("the event log holds no record at or after TO's capture start (%s) after %s (%s): what a watch saw last before TO may not be in it",
				t.UTC().Format(time.RFC3339Nano), wait, why)}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FirstWatchStart is the time of the first watch's start at or after t (a
// boot). Every watch start opens a segment, and its first record is the
// start. It reports false where no watch started since t.
func FirstWatchStart(dir string, t time.Time) (time.Time, bool) {
	segs, err := segments(dir)
	if err != nil {
		return time.Time{}, false
	}
	for _, seg := range segs {
		if seg.start.Before(t) {
			continue
		}
		f, err := os.OpenFile(seg.path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			return time.Time{}, false
		}
		sc := bufio.NewScanner(io.LimitReader(f, maxLine))
		sc.Buffer(make([]byte, 0, 4<<10), maxLine)
		var rec struct {
			Time time.Time `json:"time"`
			Kind string    `json:"kind"`
		}
		ok := sc.Scan() && json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Kind == KindWatchStart
		f.Close()
		return rec.Time, ok
	}
	return time.Time{}, false
}
