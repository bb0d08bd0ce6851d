package watch

import (
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/bpf"
	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/eventlog"
)

// Every kernel hook says what it cannot see: a hook missing from blindSpots
// would start a watch whose record claims it sees everything.
func TestEveryHookHasBlindSpots(t *testing.T) {
	for _, hook := range bpf.Hooks {
		if !slices.Contains(blindSpots[hook], eventlog.BlindBeforeStart) {
			t.Errorf("hook %s: blind spots %q lack %q", hook, blindSpots[hook], eventlog.BlindBeforeStart)
		}
	}
	if !slices.Contains(blindSpots[bpf.HookKprobe], eventlog.BlindMappingSize) {
		t.Errorf("kprobe on security_mmap_file has no mapping size, its blind spots say %q", blindSpots[bpf.HookKprobe])
	}
}

// TestRunRecords: the kernel's run records, as the kernel source reads
// them. A run's record is written as the run's first event standing for its
// count, from its first time to its last, with no descriptor. A record of a
// run whose first event was not read (never, or let go at the process's
// exit) is a loss, not a record without a device.
func TestRunRecords(t *testing.T) {
	proc, err := capture.OpenProcRoot("/proc")
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Close()
	k := &kernelSource{source: "test", ids: newIdentities(proc), classes: proc.Classes(), runs: map[runKey]eventlog.Event{}}
	var got []eventlog.Event
	emit := func(events ...eventlog.Event) { got = append(got, events...) }
	const pid, start = 4242, 1_000_000_000
	first := bpf.Event{Kind: bpf.KindOpen, PID: pid, StartNS: start, Comm: "flood", Path: "/dev/nvidia0", Major: 195, Mode: unix.S_IFCHR,
		Flags: unix.O_RDWR, FD: 3, Run: 1, TimeNS: 5_000_000_000}
	record := bpf.Event{Kind: bpf.KindOpen, PID: pid, StartNS: start, FD: -1, Run: 1, Count: 500, FirstNS: 5_100_000_000, TimeNS: 6_000_000_000}
	orphan := record
	orphan.Run = 2
	for _, e := range []bpf.Event{first, record, orphan, {Kind: bpf.KindExit, PID: pid, StartNS: start, FD: -1}, record} {
		k.handle(&e, emit)
	}
	kinds := []string{}
	for _, e := range got {
		kinds = append(kinds, e.Kind)
	}
	if want := []string{eventlog.KindOpen, eventlog.KindOpen, eventlog.KindLost, eventlog.KindExit, eventlog.KindLost}; !slices.Equal(kinds, want) {
		t.Fatalf("recorded %v, want %v", kinds, want)
	}
	r := got[1]
	if r.Count != 500 || r.FD != nil || r.Device == nil || r.Device.Path != "/dev/nvidia0" || r.Access != "rw" || r.Process.PID != pid ||
		!r.Time.Equal(k.bootBase.Add(5_100*time.Millisecond)) || !r.Last.Equal(k.bootBase.Add(6*time.Second)) {
		t.Errorf("the run's record: %+v", r)
	}
	if got[0].Count != 0 || got[0].FD == nil {
		t.Errorf("the run's first event: %+v", got[0])
	}
	if got[2].Process == nil || got[2].Process.PID != pid || !strings.Contains(got[2].Note, "500 like opens") {
		t.Errorf("the orphan record's loss: %+v", got[2])
	}
}
