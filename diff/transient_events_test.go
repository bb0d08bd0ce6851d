package diff

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

// eventsOf builds an event log window of a watch started before FROM, the
// events given, and the watch's heartbeats through the hour after FROM.
func eventsOf(events ...eventlog.Event) *eventlog.ReadResult {
	start := eventlog.Event{Time: t0.Add(-time.Hour), Kind: eventlog.KindWatchStart, Mode: "tracepoint"}
	for at := eventlog.AliveEvery; at <= time.Hour; at += eventlog.AliveEvery {
		events = append(events, eventlog.Event{Time: t0.Add(at), Kind: eventlog.KindAlive, Mode: "tracepoint"})
	}
	slices.SortStableFunc(events, func(a, b eventlog.Event) int { return a.Time.Compare(b.Time) }) // as the log holds them
	return &eventlog.ReadResult{Before: &start, Events: events}
}

func devEvent(at time.Duration, kind string, p *eventlog.Process, path, access, perms string) eventlog.Event {
	return eventlog.Event{Time: t0.Add(at), Kind: kind, Source: "tracepoint", Process: p, Access: access, Perms: perms,
		Device: &eventlog.Device{Path: path, Number: "195:0", Type: "char", Class: snapshot.ClassNVIDIA}}
}

func compareWindow(opts Options, from, to *snapshot.Snapshot) *Result {
	to.Host.CaptureStart = t0.Add(time.Hour)
	return Compare(from, to, opts)
}

func TestTransientGPUProcess(t *testing.T) {
	worker := &eventlog.Process{PID: 500, StartTime: 9000, Comm: "python3", Exe: "/usr/bin/python3.11", UID: 1000}
	miner := &eventlog.Process{PID: 501, StartTime: 9001, Comm: "python3", Exe: "/tmp/.x/xmrig", UID: 1000}
	reader := &eventlog.Process{PID: 502, StartTime: 9002, Comm: "nvidia-smi", Exe: "/usr/bin/nvidia-smi", UID: 1000}
	alive := &eventlog.Process{PID: 600, StartTime: 9100, Comm: "trainer", Exe: "/opt/trainer", UID: 1000}
	before := &eventlog.Process{PID: 503, StartTime: 9003, Comm: "early", Exe: "/usr/bin/early", UID: 1000}
	events := eventsOf(
		devEvent(-time.Minute, eventlog.KindOpen, before, "/dev/nvidia0", "rw", ""), // before FROM, so not in the window
		devEvent(time.Minute, eventlog.KindOpen, worker, "/dev/nvidia0", "rw", ""),
		devEvent(time.Minute, eventlog.KindMmap, worker, "/dev/nvidia0", "", "rw-s"),
		devEvent(2*time.Minute, eventlog.KindOpen, miner, "/dev/nvidia0", "r", ""),
		devEvent(3*time.Minute, eventlog.KindOpen, reader, "/dev/nvidiactl", "r", ""),
		devEvent(3*time.Minute, eventlog.KindMmap, reader, "/dev/nvidiactl", "", "r--s"),
		devEvent(4*time.Minute, eventlog.KindOpen, alive, "/dev/nvidia0", "rw", ""),
		eventlog.Event{Time: t0.Add(5 * time.Minute), Kind: eventlog.KindExit, Process: worker},
	)
	from := snap("from", proc(1, 10, "init", "/sbin/init"))
	to := snap("to", proc(1, 10, "init", "/sbin/init"), proc(600, 9100, "trainer", "/opt/trainer",
		holder(3, "/dev/nvidia0", "rw", "195:0")))
	r := compareWindow(Options{Events: events}, from, to)
	expect(t, r,
		"leftover_device_holder high 600 /dev/nvidia0",
		"transient_gpu_process high 500 /dev/nvidia0",     // a writable mapping
		"transient_gpu_process high 501 /dev/nvidia0",     // masquerade, exe under /tmp, comm disagrees
		"transient_gpu_process medium 502 /dev/nvidiactl", // read-only, and no masquerade
		"unexpected_gpu_process medium 600",
	)
	for _, f := range r.Findings {
		if f.Kind == KindTransientGPUProcess && f.Process.PID == 500 && !strings.Contains(f.Summary, "ended at") {
			t.Errorf("summary does not say when it ended: %s", f.Summary)
		}
	}
	if len(r.Notes) != 0 {
		t.Errorf("a watch ran all along, yet notes: %q", r.Notes)
	}
	// Without an event log nothing is said about transients.
	expect(t, compareWindow(Options{}, from, to), "leftover_device_holder high 600 /dev/nvidia0", "unexpected_gpu_process medium 600")
}

// TestTransientCoverageNoted holds that a window the watch did not cover is
// said in the notes, as are events the kernel dropped.
func TestTransientCoverageNoted(t *testing.T) {
	events := &eventlog.ReadResult{Events: []eventlog.Event{
		{Time: t0.Add(10 * time.Minute), Kind: eventlog.KindWatchStart, Mode: eventlog.ModeFallback},
		{Time: t0.Add(20 * time.Minute), Kind: eventlog.KindLost, Lost: 7},
	}}
	r := compareWindow(Options{Events: events}, snap("from"), snap("to"))
	notes := strings.Join(r.Notes, "\n")
	if !strings.Contains(notes, "no gpusnap watch recorded from") || !strings.Contains(notes, "dropped 7 watch events") ||
		!strings.Contains(notes, "ran in its fallback mode") {
		t.Errorf("notes: %q", r.Notes)
	}
	// A kernel-hooked watch that ran all along leaves nothing to say.
	if r := compareWindow(Options{Events: eventsOf()}, snap("from"), snap("to")); len(r.Notes) != 0 || !r.Complete {
		t.Errorf("a tracepoint watch all along: notes %q", r.Notes)
	}
}

// TestInheritedFromEvents holds that a survivor the event log shows forked
// from a process that mapped the device is marked inherited from it.
func TestInheritedFromEvents(t *testing.T) {
	parent := &eventlog.Process{PID: 700, StartTime: 9200, Comm: "job", Exe: "/opt/job"}
	child := &eventlog.Process{PID: 701, StartTime: 9201, Comm: "job", Exe: "/opt/job"}
	events := eventsOf(
		devEvent(time.Minute, eventlog.KindMmap, parent, "/dev/nvidia0", "", "rw-s"),
		eventlog.Event{Time: t0.Add(2 * time.Minute), Kind: eventlog.KindFork, Process: parent, Child: child},
	)
	to := snap("to", proc(701, 9201, "job", "/opt/job", mapping("/dev/nvidia0", "rw-s", 0x7f0000000000, 4096, 0, "195:0")))
	r := compareWindow(Options{Events: events}, snap("from"), to)
	var found bool
	for _, f := range r.Findings {
		if f.Kind == KindLeftoverDeviceMapping {
			found = true
			if f.InheritedFrom != "700@9200 (/opt/job)" {
				t.Errorf("inherited from %q", f.InheritedFrom)
			}
		}
	}
	if !found {
		t.Errorf("no leftover mapping: %+v", r.Findings)
	}
}

// In TestTransientDuringTOCapture a worker that mapped the GPU and exited
// while TO was being captured is in neither snapshot. The window runs to
// TO's capture end, so the event log still reports it.
func TestTransientDuringTOCapture(t *testing.T) {
	worker := &eventlog.Process{PID: 510, StartTime: 9010, Comm: "python3", Exe: "/usr/bin/python3", UID: 1000}
	at := time.Hour + time.Second // after TO's capture started, before it ended
	events := eventsOf(devEvent(at, eventlog.KindMmap, worker, "/dev/nvidia0", "", "rw-s"))
	from := snap("from", proc(1, 10, "init", "/sbin/init"))
	to := snap("to", proc(1, 10, "init", "/sbin/init"))
	to.Host.CaptureEnd = t0.Add(time.Hour + 2*time.Second)
	expect(t, compareWindow(Options{Events: events}, from, to), "transient_gpu_process high 510 /dev/nvidia0")
}
