package eventlog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeLog writes a watch's records through a journal and returns the log
// and its one segment's path.
func writeLog(t *testing.T, n int) (dir, seg string) {
	t.Helper()
	dir = JournalDir(filepath.Join(t.TempDir(), "gpusnap.db"))
	j, err := OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	events := []Event{{Time: at(0), Kind: KindWatchStart, Mode: "tracepoint"}}
	for i := 1; i < n; i++ {
		events = append(events, Event{Time: at(i), Kind: KindOpen, Access: "rw", Process: &Process{PID: 100 + i, StartTime: 7}})
	}
	if k, err := j.Append(events[:n/2]); err != nil || k != n/2 {
		t.Fatal(k, err)
	}
	if k, err := j.Append(events[n/2:]); err != nil || k != n-n/2 {
		t.Fatal(k, err)
	}
	j.Close()
	segs, _ := segments(dir)
	return dir, segs[0].path
}

// editLines rewrites seg with edit applied to its lines.
func editLines(t *testing.T, seg string, edit func([][]byte) [][]byte) {
	t.Helper()
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	lines = edit(lines[:len(lines)-1])
	if err := os.WriteFile(seg, bytes.Join(lines, nil), 0o600); err != nil {
		t.Fatal(err)
	}
}

// readFaults reads the whole log and returns its coverage of the records' span.
func readFaults(t *testing.T, dir string) (ReadResult, Coverage) {
	t.Helper()
	r, err := ReadEvents(dir, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return r, Cover(r, at(0), at(10))
}

func TestChainIntact(t *testing.T) {
	dir, _ := writeLog(t, 10)
	r, cov := readFaults(t, dir)
	if len(r.Events) != 10 || r.Broken != 0 || r.Damaged != 0 || r.Unchained != 0 || len(cov.Faults) != 0 {
		t.Fatalf("an untouched log: %d events, %+v", len(r.Events), cov)
	}
	for i, e := range r.Events {
		if e.Seq != uint64(i+1) {
			t.Errorf("record %d has seq %d", i, e.Seq)
		}
	}
}

// TestChainNamesTampering: a record deleted, a byte edited, two records
// swapped, a record re-timed: each is named by segment, line and seq, and
// the window is not complete.
func TestChainNamesTampering(t *testing.T) {
	cases := []struct {
		name    string
		edit    func([][]byte) [][]byte
		seqs    []uint64 // the records named
		damaged int
	}{
		{"delete", func(l [][]byte) [][]byte { return append(l[:4:4], l[5:]...) }, []uint64{6}, 0},
		{"delete first", func(l [][]byte) [][]byte { return l[1:] }, []uint64{2}, 0},
		{"edit a byte", func(l [][]byte) [][]byte {
			l[3] = bytes.Replace(l[3], []byte(`"pid":103`), []byte(`"pid":903`), 1)
			return l
		}, []uint64{4}, 0},
		{"re-time", func(l [][]byte) [][]byte {
			l[6] = bytes.Replace(l[6], []byte(`12:00:06`), []byte(`11:00:06`), 1)
			return l
		}, []uint64{7}, 0},
		{"swap", func(l [][]byte) [][]byte {
			l[2], l[3] = l[3], l[2]
			return l
		}, []uint64{4, 3, 5}, 0}, // 5 no longer follows its predecessor either
		{"garble", func(l [][]byte) [][]byte {
			l[5] = []byte("{\"time\":\n")
			return l
		}, nil, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, seg := writeLog(t, 10)
			editLines(t, seg, tc.edit)
			r, cov := readFaults(t, dir)
			if cov.Complete() {
				t.Errorf("a tampered log covers its window: %+v", cov)
			}
			if r.Damaged != tc.damaged || r.Broken != len(tc.seqs) || len(cov.Faults) != len(tc.seqs)+tc.damaged {
				t.Fatalf("damaged %d broken %d, faults %v", r.Damaged, r.Broken, cov.Faults)
			}
			var seqs []uint64
			for _, f := range cov.Faults {
				if f.Segment != filepath.Base(seg) || f.Line == 0 {
					t.Errorf("fault not named by its segment and line: %+v", f)
				}
				if f.Seq != 0 {
					seqs = append(seqs, f.Seq)
				}
				t.Logf("%s", f)
			}
			if !slicesEqual(seqs, tc.seqs) {
				t.Errorf("named seqs %v, want %v", seqs, tc.seqs)
			}
		})
	}
}

func slicesEqual(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestChainAcrossSegments: a watch's seq goes on in its next segment, so a
// record removed at the end of a segment is named where the next begins.
func TestChainAcrossSegments(t *testing.T) {
	dir, seg := writeLog(t, 6)
	// A second segment of the same watch, as rotate starts it.
	j, err := OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	j.chain.seq = 6
	if _, err := j.Append([]Event{{Time: at(7), Kind: KindExit, Process: &Process{PID: 101, StartTime: 7}}}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	if r, _ := readFaults(t, dir); r.Broken != 0 {
		t.Fatalf("an untouched two-segment log: %+v", r.Faults)
	}
	editLines(t, seg, func(l [][]byte) [][]byte { return l[:5] })
	r, _ := readFaults(t, dir)
	if r.Broken != 1 || r.Faults[0].Seq != 7 || !strings.Contains(r.Faults[0].Why, "seq 7 follows 5") {
		t.Errorf("the last record of a segment removed: %+v", r.Faults)
	}
}

// TestUnchainedLogReads: a log written before the chain (no seq, no hash)
// reads as before, and says it is unchained; a line without a chain inside
// a chained segment is named.
func TestUnchainedLogReads(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, at(0).Format(segmentTimeLayout)+segmentSuffix)
	old := `{"time":"2026-11-30T12:00:00Z","kind":"watch_start","mode":"tracepoint"}
{"time":"2026-11-30T12:00:01Z","kind":"open","process":{"pid":42,"start_time":7,"uid":0},"access":"rw"}
`
	os.WriteFile(name, []byte(old), 0o600)
	r, cov := readFaults(t, dir)
	if len(r.Events) != 2 || r.Unchained != 2 || cov.Unchained != 2 || r.Broken != 0 || !cov.Complete() {
		t.Errorf("an old log: %d events, %+v", len(r.Events), cov)
	}

	dir, seg := writeLog(t, 5)
	editLines(t, seg, func(l [][]byte) [][]byte {
		return append(l[:3:3], append([][]byte{[]byte(`{"time":"2026-11-30T12:00:02Z","kind":"exit","process":{"pid":1,"start_time":1,"uid":0}}` + "\n")}, l[3:]...)...)
	})
	if r, _ := readFaults(t, dir); r.Broken != 1 || !strings.Contains(r.Faults[0].Why, "without seq or hash") {
		t.Errorf("a line slipped into a chained segment: %+v", r.Faults)
	}
}

// TestWindowWalksFromDisk: a Window's walks hand over what ReadEvents
// holds, in the same order, with the same findings, and stop when asked.
func TestWindowWalksFromDisk(t *testing.T) {
	dir, seg := writeLog(t, 10)
	editLines(t, seg, func(l [][]byte) [][]byte { return append(l[:4:4], l[5:]...) })
	held, err := ReadEvents(dir, at(2), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := OpenWindow(dir, at(2), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var walked []uint64
	for range 2 { // walked twice: read from disk each time
		walked = walked[:0]
		if err := w.Each(func(e *Event) bool { walked = append(walked, e.Seq); return true }); err != nil {
			t.Fatal(err)
		}
	}
	var want []uint64
	for _, e := range held.Events {
		want = append(want, e.Seq)
	}
	if len(want) != 7 || !slicesEqual(walked, want) || w.Meta().Broken != held.Broken || w.Meta().Before == nil || w.Meta().Before.Seq != held.Before.Seq {
		t.Errorf("walked %v, held %v; meta %+v", walked, want, w.Meta())
	}
	got, _ := CoverSource(w, at(2), at(8))
	if got.Broken != 1 || got.Complete() {
		t.Errorf("coverage of the walked window: %+v", got)
	}
	n := 0
	w.Each(func(*Event) bool { n++; return n < 2 })
	if n != 2 {
		t.Errorf("a walk asked to stop went on: %d", n)
	}
	if _, err := OpenWindow(filepath.Join(t.TempDir(), "none.events"), time.Time{}, time.Time{}); !errors.Is(err, ErrNoLog) {
		t.Errorf("no log: %v", err)
	}
}
