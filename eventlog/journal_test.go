package eventlog

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func at(s int) time.Time { return time.Date(2026, 11, 30, 12, 0, s, 0, time.UTC) }

func TestJournalRoundTrip(t *testing.T) {
	dir := JournalDir(filepath.Join(t.TempDir(), "gpusnap.db"))
	j, err := OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{PID: 42, StartTime: 7, Comm: "w"}
	if _, err := j.Append([]Event{{Time: at(0), Kind: KindWatchStart, Mode: "tracepoint"}, {Time: at(1), Kind: KindOpen, Process: p}}); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenJournal(dir); !errors.Is(err, ErrWatchRunning) {
		t.Errorf("a second watch on the same log: %v", err)
	}
	if _, err := j.Append([]Event{{Time: at(2), Kind: KindExit, Process: p}}); err != nil {
		t.Fatal(err)
	}
	// A reader sees what was synced, while the watch still runs.
	r, err := ReadEvents(dir, at(1), time.Time{})
	if err != nil || len(r.Events) != 2 || r.Before == nil || r.Before.Kind != KindWatchStart || r.Damaged != 0 {
		t.Fatalf("read: %+v, %v", r, err)
	}
	if got := r.Events[0].Process.Key(); got != "42@7" {
		t.Errorf("key %s", got)
	}
	j.Close()

	// A watch killed mid-write leaves a torn last line: not an event, and
	// said once a later segment exists.
	segs, _ := segments(dir)
	f, _ := os.OpenFile(segs[0].path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"time":"2026-11-30T12:00:03Z","kind":"op`)
	f.Close()
	r, _ = ReadEvents(dir, time.Time{}, time.Time{})
	if r.Damaged != 0 || len(r.Events) != 3 {
		t.Errorf("torn last line of the last segment: %+v", r)
	}
	j, err = OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	j.Append([]Event{{Time: time.Now(), Kind: KindWatchStart}})
	r, _ = ReadEvents(dir, time.Time{}, time.Time{})
	if r.Damaged != 1 || len(r.Events) != 4 {
		t.Errorf("torn line before a later segment: damaged %d, %d events", r.Damaged, len(r.Events))
	}
	cov := Cover(r, at(0), time.Now())
	if len(cov.Gaps) != 1 || cov.Gaps[0].From != at(2) {
		t.Errorf("a watch that died is a gap from its last record: %+v", cov.Gaps)
	}
}

// TestJournalRefusesOthersDirectory: the log holds command lines and who ran
// what; a directory others can write, or a symlink, is refused.
func TestJournalRefusesOthersDirectory(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open.events")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	if _, err := OpenJournal(open); err == nil {
		t.Error("a world-writable log directory was accepted")
	}
	link := filepath.Join(base, "link.events")
	os.Symlink(t.TempDir(), link)
	if _, err := OpenJournal(link); err == nil {
		t.Error("a symlinked log directory was accepted")
	}
	if _, err := ReadEvents(filepath.Join(base, "none.events"), time.Time{}, time.Time{}); !errors.Is(err, ErrNoLog) {
		t.Errorf("no log: %v", err)
	}
}

// TestReadBoundsLines: a line far longer than any event is skipped and counted.
func TestReadBoundsLines(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, at(0).Format(segmentTimeLayout)+segmentSuffix)
	long := make([]byte, 1<<20)
	for i := range long {
		long[i] = 'x'
	}
	os.WriteFile(name, append(append(long, '\n'), []byte(`{"time":"2026-11-30T12:00:01Z","kind":"exit"}`+"\n")...), 0o600)
	r, err := ReadEvents(dir, time.Time{}, time.Time{})
	if err != nil || r.Damaged != 1 || len(r.Events) != 1 {
		t.Errorf("%+v %v", r, err)
	}
}

// TestCoverSilentWatch: a watch killed by SIGKILL (or the OOM killer) writes
// no stop record. Its heartbeats end, and the silence after them is a gap,
// not a quiet window; a watch that keeps its heartbeats covers the window.
func TestCoverSilentWatch(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	start := Event{Time: t0.Add(-time.Hour), Kind: KindWatchStart, Mode: "tracepoint"}
	beats := func(until time.Duration) []Event {
		var out []Event
		for at := AliveEvery; at <= until; at += AliveEvery {
			out = append(out, Event{Time: t0.Add(at), Kind: KindAlive})
		}
		return out
	}
	to := t0.Add(time.Hour)
	if cov := Cover(ReadResult{Before: &start, Events: beats(time.Hour)}, t0, to); !cov.Complete() {
		t.Errorf("a watch that kept its heartbeats: %+v", cov)
	}
	cov := Cover(ReadResult{Before: &start, Events: beats(10 * time.Minute)}, t0, to)
	if len(cov.Gaps) != 1 || !cov.Gaps[0].From.Equal(t0.Add(10*time.Minute)) || !cov.Gaps[0].To.Equal(to) {
		t.Errorf("a watch silent since 10 minutes in: %+v", cov)
	}
	// Nothing at all in the window from a watch started before it.
	if cov := Cover(ReadResult{Before: &start}, t0, to); len(cov.Gaps) != 1 || !cov.Gaps[0].From.Equal(t0) {
		t.Errorf("a watch never heard from in the window: %+v", cov)
	}
	// A window shorter than the heartbeat's slack is not judged by silence.
	if cov := Cover(ReadResult{Before: &start}, t0, t0.Add(AliveEvery)); !cov.Complete() {
		t.Errorf("a 30 s window: %+v", cov)
	}
	// NVML's GPU events not read for a while are not kernel events dropped
	// (a diff notes them itself); a source that could not count is one at least.
	events := beats(time.Hour)
	events = append(events, Event{Time: t0.Add(time.Minute), Kind: KindLost, Source: SourceNVML, Note: "NVML's GPU events: ..."})
	if cov := Cover(ReadResult{Before: &start, Events: events}, t0, to); cov.Lost != 0 {
		t.Errorf("an NVML lost record counted as dropped events: %+v", cov)
	}
	events = append(events, Event{Time: t0.Add(2 * time.Minute), Kind: KindLost, Source: SourceProcConnector, Note: "overrun"})
	if cov := Cover(ReadResult{Before: &start, Events: events}, t0, to); cov.Lost != 1 {
		t.Errorf("the proc connector's overrun: %+v", cov)
	}
}
