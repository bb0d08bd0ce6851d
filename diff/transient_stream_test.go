package diff

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/testenv"
)

// peakHeap runs f and returns the most heap in use above what was in use
// before it, sampled every few milliseconds.
func peakHeap(f func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > base && ms.HeapInuse-base > peak.Load() {
				peak.Store(ms.HeapInuse - base)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	f()
	close(stop)
	<-done
	return peak.Load()
}

// TestTransientWindowStreamed holds that a window of 40,000 device events
// (two processes that opened the node in a loop, as a watch without
// coalescing recorded them) is walked from disk, never held. The diff's heap
// grows far less than holding the window would cost, and both processes are
// found, with their events counted.
func TestTransientWindowStreamed(t *testing.T) {
	testenv.NotShort(t, "writes a 10 MB event log")
	dir := eventlog.JournalDir(filepath.Join(t.TempDir(), "gpusnap.db"))
	j, err := eventlog.OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The log's segments are named by when they were started, and its
	// records come after that, in the hour from base.
	base := time.Now().Add(time.Second)
	const n = 40000
	flooders := []*eventlog.Process{
		{PID: 700, StartTime: 9700, Comm: "flood", Exe: "/usr/bin/bash", UID: 65534},
		{PID: 701, StartTime: 9701, Comm: "flood", Exe: "/usr/bin/bash", UID: 65534},
	}
	batch := []eventlog.Event{{Time: base, Kind: eventlog.KindWatchStart, Mode: "tracepoint"}}
	for i := range n {
		at := base.Add(time.Second + time.Duration(i)*(time.Hour/n))
		e := devEvent(0, eventlog.KindOpen, flooders[i%2], "/dev/nvidia0", "rw", "")
		e.Time = at
		batch = append(batch, e)
		if i%(n/240) == 0 {
			batch = append(batch, eventlog.Event{Time: at, Kind: eventlog.KindAlive, Mode: "tracepoint"})
		}
		if len(batch) == 10000 {
			if _, err := j.Append(batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	batch = append(batch, eventlog.Event{Time: base.Add(time.Hour + time.Second), Kind: eventlog.KindAlive, Mode: "tracepoint"})
	if _, err := j.Append(batch); err != nil {
		t.Fatal(err)
	}
	j.Close()

	from := snap("from", proc(1, 10, "init", "/sbin/init"))
	to := snap("to", proc(1, 10, "init", "/sbin/init"))
	from.Host.CaptureStart, to.Host.CaptureStart = base.Add(time.Millisecond), base.Add(time.Hour+2*time.Second)
	var streamed *Result
	stream := peakHeap(func() {
		w, err := eventlog.OpenWindow(dir, from.Host.CaptureStart, to.Host.CaptureStart)
		if err != nil {
			t.Fatal(err)
		}
		streamed = Compare(from, to, Options{Events: w})
	})
	held := peakHeap(func() {
		r, err := eventlog.ReadEvents(dir, from.Host.CaptureStart, to.Host.CaptureStart)
		if err != nil {
			t.Fatal(err)
		}
		Compare(from, to, Options{Events: &r})
	})
	t.Logf("heap growth: %.1f MiB walking the window from disk, %.1f MiB holding it", float64(stream)/(1<<20), float64(held)/(1<<20))
	expect(t, streamed, "transient_gpu_process medium 700 /dev/nvidia0", "transient_gpu_process medium 701 /dev/nvidia0")
	for _, f := range streamed.Findings {
		if more := fmt.Sprintf("and %d more events", n/2-maxTransientEvidence); !strings.Contains(strings.Join(f.Evidence, "\n"), more) {
			t.Errorf("%d: evidence does not say %q: %q", f.Process.PID, more, f.Evidence[len(f.Evidence)-3:])
		}
	}
	if len(streamed.Notes) != 0 {
		t.Errorf("notes: %q", streamed.Notes)
	}
	if stream > 24<<20 {
		t.Errorf("walking the window grew the heap by %.1f MiB (limit 24)", float64(stream)/(1<<20))
	}
}

// TestDamagedLogNotCovered holds that lines of the window's segments that
// are not events, or records that break the chain, make a window a watch
// recorded not covered, naming where. The window's record may have lost or
// changed an event.
func TestDamagedLogNotCovered(t *testing.T) {
	from := snap("from", proc(1, 10, "init", "/sbin/init"))
	to := snap("to", proc(1, 10, "init", "/sbin/init"))
	for _, r := range []*eventlog.ReadResult{
		{Damaged: 1, Faults: []eventlog.Fault{{Segment: "s.jsonl", Line: 3, Why: "not an event"}}},
		{Broken: 2, Faults: []eventlog.Fault{{Segment: "s.jsonl", Line: 4, Seq: 9, Why: "hash does not chain"}}},
	} {
		events := eventsOf()
		events.Damaged, events.Broken, events.Faults = r.Damaged, r.Broken, r.Faults
		res := compareWindow(Options{Events: events}, from, to)
		var evidence []string
		for _, f := range res.Findings {
			if f.Kind == KindWindowNotCovered {
				evidence = append(evidence, f.Evidence...)
			}
		}
		if !strings.Contains(strings.Join(evidence, "\n"), "s.jsonl line") {
			t.Errorf("damaged %d, broken %d: window_not_covered evidence %q", r.Damaged, r.Broken, evidence)
		}
	}
	if res := compareWindow(Options{Events: eventsOf()}, from, to); len(res.Findings) != 0 || len(res.Notes) != 0 {
		t.Errorf("an intact window: findings %+v, notes %q", res.Findings, res.Notes)
	}
}
