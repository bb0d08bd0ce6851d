package diff

import (
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

// In TestHiddenDeviceUse the event log shows a process open the device in
// the window (it parked the fd in its own socket's queue and closed it), and
// at TO it is alive with no holder or mapping, a high hidden_device_use. A
// process that still holds what it opened is the snapshot rules' (a
// leftover holder), and one gone at TO a transient.
func TestHiddenDeviceUse(t *testing.T) {
	parker := &eventlog.Process{PID: 800, StartTime: 9300, Comm: "parker", Exe: "/opt/parker", UID: 1000}
	holding := &eventlog.Process{PID: 801, StartTime: 9301, Comm: "trainer", Exe: "/opt/trainer", UID: 1000}
	gone := &eventlog.Process{PID: 802, StartTime: 9302, Comm: "worker", Exe: "/opt/worker", UID: 1000}
	reused := &eventlog.Process{PID: 803, StartTime: 9303, Comm: "old", Exe: "/opt/old", UID: 1000}
	events := eventsOf(
		devEvent(time.Minute, eventlog.KindOpen, parker, "/dev/nvidia0", "rw", ""),
		devEvent(time.Minute, eventlog.KindOpen, holding, "/dev/nvidia0", "rw", ""),
		devEvent(time.Minute, eventlog.KindOpen, gone, "/dev/nvidia0", "r", ""),
		devEvent(time.Minute, eventlog.KindOpen, reused, "/dev/nvidia0", "r", ""),
	)
	from := snap("from", proc(1, 10, "init", "/sbin/init"))
	to := snap("to", proc(1, 10, "init", "/sbin/init"),
		proc(800, 9300, "parker", "/opt/parker"),
		proc(801, 9301, "trainer", "/opt/trainer", holder(3, "/dev/nvidia0", "rw", "195:0")),
		proc(803, 9999, "new", "/opt/new")) // PID 803 reused by another process
	r := compareWindow(Options{Events: events}, from, to)
	expect(t, r,
		"hidden_device_use high 800 /dev/nvidia0",
		"leftover_device_holder high 801 /dev/nvidia0",
		"transient_gpu_process medium 802 /dev/nvidia0",
		"transient_gpu_process medium 803 /dev/nvidia0",
		"unexpected_gpu_process medium 801",
	)
	f := first(t, r)
	if ev := strings.Join(f.Evidence, "\n"); f.Process.Exe != "/opt/parker" || !strings.Contains(ev, "event: ") || !strings.Contains(ev, "open (tracepoint) /dev/nvidia0 195:0 rw") {
		t.Errorf("hidden_device_use: %+v", f)
	}
	// Before FROM, the open is not the window's.
	early := eventsOf(devEvent(-time.Minute, eventlog.KindOpen, parker, "/dev/nvidia0", "rw", ""))
	expect(t, compareWindow(Options{Events: early}, from, to), "leftover_device_holder high 801 /dev/nvidia0", "unexpected_gpu_process medium 801")
}

// TestCheckHiddenDeviceUse holds that check fails on a process alive now
// that the log shows open a GPU checked in its window and that holds nothing
// the capture sees. An open of another GPU, or before the window, is not
// this check's.
func TestCheckHiddenDeviceUse(t *testing.T) {
	parker := &eventlog.Process{PID: 800, StartTime: 9300, Comm: "parker", Exe: "/opt/parker", UID: 1000}
	open0 := devEvent(time.Minute, eventlog.KindOpen, parker, "/dev/nvidia0", "rw", "")
	open0.Device.GPU = intp(0)
	to := withGPUs(snap("now", proc(800, 9300, "parker", "/opt/parker")), gpuN(0, "GPU-0", 1<<20), gpuN(1, "GPU-1", 1<<20))
	to.Host.CaptureStart = t0.Add(time.Hour)
	run := func(list string, since time.Time) *Result {
		opts := CheckOptions{ZombieThreshold: DefaultZombieThreshold, Events: eventsOf(open0), Since: since}
		if list != "" {
			s, err := snapshot.ParseGPUList(list)
			if err != nil {
				t.Fatal(err)
			}
			opts.GPUs = &s
		}
		return Check(to, opts)
	}
	expect(t, run("0", t0), "hidden_device_use high 800 /dev/nvidia0")
	expect(t, run("", t0), "hidden_device_use high 800 /dev/nvidia0")
	expect(t, run("1", t0))
	expect(t, run("0", t0.Add(30*time.Minute)))

	// A CUDA process keeps /dev/nvidiactl open beside its GPU node. The
	// parker keeps it too, in sight, and parks its /dev/nvidia0 fd. What it
	// holds in sight names no GPU, so its GPU 0 is still hidden.
	to.Processes[0] = proc(800, 9300, "parker", "/opt/parker", holder(3, ctl, "rw", ctlNo))
	expect(t, run("0", t0), "hidden_device_use high 800 /dev/nvidia0")
	// Holding GPU 1 in sight hides nothing of GPU 0 either.
	to.Processes[0] = proc(800, 9300, "parker", "/opt/parker", holder(3, "/dev/nvidia1", "rw", "195:1"))
	expect(t, run("0", t0), "hidden_device_use high 800 /dev/nvidia0")
	// Holding GPU 0 itself in sight, the check sees it in use.
	to.Processes[0] = proc(800, 9300, "parker", "/opt/parker", holder(3, "/dev/nvidia0", "rw", "195:0"))
	expect(t, run("0", t0), "gpu_in_use high 800 /dev/nvidia0")
}

// TestWindowNotCovered holds that where a watch was expected (its record
// precedes FROM, or --expect-watch), each reason the log does not cover the
// window is evidence of one medium window_not_covered finding. Where none
// was expected, each is a note. A watch whose only blind spots hide no open or
// mapping covers its window.
func TestWindowNotCovered(t *testing.T) {
	start := func(blind ...string) *eventlog.Event {
		return &eventlog.Event{Time: t0.Add(-time.Hour), Kind: eventlog.KindWatchStart, Mode: "tracepoint", Blind: blind}
	}
	beats := func(until time.Duration) []eventlog.Event {
		var out []eventlog.Event
		for at := eventlog.AliveEvery; at <= until; at += eventlog.AliveEvery {
			out = append(out, eventlog.Event{Time: t0.Add(at), Kind: eventlog.KindAlive})
		}
		return out
	}
	unflushed := eventlog.Problem{Kind: eventlog.ProblemUnflushed, Text: "the event log holds no record at or after TO's capture start"}
	for _, c := range []struct {
		name     string
		opts     Options
		evidence string // "" when covered
	}{
		{"covered", Options{Events: &eventlog.ReadResult{Before: start(eventlog.BlindBeforeStart, eventlog.BlindMappingSize, "GPU processes NVML lists (no NVML)", "NVML events of GPU-0 (not supported)", "Xid and ECC events from NVML (disabled by --no-nvml)"), Events: beats(time.Hour)}}, ""},
		{"watch killed mid-window", Options{Events: &eventlog.ReadResult{Before: start(), Events: beats(20 * time.Minute)}}, "gap: no gpusnap watch recorded from"},
		{"lost events", Options{Events: &eventlog.ReadResult{Before: start(), Events: append(beats(time.Hour), eventlog.Event{Time: t0.Add(time.Hour), Kind: eventlog.KindLost, Lost: 3})}}, "lost: the kernel dropped 3 watch events"},
		{"damaged lines", Options{Events: &eventlog.ReadResult{Before: start(), Events: beats(time.Hour), Damaged: 2}}, "damaged: 2 lines of the event log are not events"},
		{"blind to io_uring", Options{Events: &eventlog.ReadResult{Before: start("opens through io_uring"), Events: beats(time.Hour)}}, "blind: a watch of the window cannot see opens through io_uring"},
		{"flush never reached TO", Options{Events: &eventlog.ReadResult{Before: start(), Events: beats(time.Hour)}, LogProblems: []eventlog.Problem{unflushed}}, "unflushed: the event log holds no record"},
		{"expected, no log", Options{ExpectWatch: true, LogProblems: []eventlog.Problem{{Kind: eventlog.ProblemNoLog, Text: "there is no event log"}}}, "no_log: there is no event log"},
		{"expected, log not read", Options{ExpectWatch: true}, "no_log: the event log was not read"},
		{"expected, watch started after FROM", Options{ExpectWatch: true, Events: &eventlog.ReadResult{Events: append([]eventlog.Event{{Time: t0.Add(time.Minute), Kind: eventlog.KindWatchStart, Mode: "lsm"}}, beats(time.Hour)...)}}, "gap: no gpusnap watch recorded from 2026-11-29T20:00:00Z"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := compareWindow(c.opts, snap("from"), snap("to"))
			if c.evidence == "" {
				expect(t, r)
				if len(r.Notes) != 0 || !r.Complete {
					t.Errorf("notes %q, complete %v", r.Notes, r.Complete)
				}
				return
			}
			expect(t, r, "window_not_covered medium 0")
			if ev := strings.Join(r.Findings[0].Evidence, "\n"); !strings.Contains(ev, c.evidence) || r.Complete {
				t.Errorf("evidence %q, want %q; complete %v", ev, c.evidence, r.Complete)
			}
			if !r.Failed(Medium) {
				t.Error("the default --fail-on passes it")
			}
		})
	}
	// No watch expected (no record before FROM, none configured) gives notes.
	r := compareWindow(Options{LogProblems: []eventlog.Problem{unflushed}, Events: &eventlog.ReadResult{Events: beats(time.Hour), Damaged: 1}}, snap("from"), snap("to"))
	expect(t, r)
	if notes := strings.Join(r.Notes, "\n"); !strings.Contains(notes, "event log: the event log holds no record") || !strings.Contains(notes, "event log: 1 lines") || r.Complete {
		t.Errorf("notes %q", r.Notes)
	}
	// No log and none expected leaves nothing to say.
	if r := compareWindow(Options{}, snap("from"), snap("to")); len(r.Notes) != 0 {
		t.Errorf("notes %q", r.Notes)
	}
}

// In TestWindowNotCoveredBounded a tenant that kills the watch again and
// again makes a gap each time, and gets one finding, its evidence bounded.
func TestWindowNotCoveredBounded(t *testing.T) {
	var events []eventlog.Event
	for i := range 1000 {
		events = append(events, eventlog.Event{Time: t0.Add(time.Duration(i) * 3 * time.Second), Kind: eventlog.KindWatchStart, Mode: "lsm"})
	}
	r := compareWindow(Options{ExpectWatch: true, Events: &eventlog.ReadResult{Events: events}}, snap("from"), snap("to"))
	expect(t, r, "window_not_covered medium 0")
	if ev := r.Findings[0].Evidence; len(ev) != maxCoverageEvidence+1 || !strings.HasPrefix(ev[len(ev)-1], "and ") {
		t.Errorf("%d evidence lines, last %q", len(ev), ev[len(ev)-1])
	}
}
