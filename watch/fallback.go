package watch

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

// The fallback, where BPF cannot load, hears every exec, fork and exit on the
// host (not in child pid namespaces) from the proc connector. Each interval
// it rescans the young processes (youngTicks), the device users and a
// rotating share of the rest (all every sweepTicks). It sees a device only
// while a process holds or maps it.

const (
	youngTicks = 10
	sweepTicks = 60
)

var fallbackBlind = []string{
	"opens and mappings themselves: a device is seen only while a process holds or maps it at a rescan",
	"a process that holds a device for less than --interval",
	"a process older than 10 intervals that takes a device: found by the rotating sweep, within 60 intervals",
}

// tracked is a process the fallback has seen using a device.
type tracked struct {
	proc    *eventlog.Process
	devices map[string]bool
}

type fallbackSource struct {
	proc     *capture.ProcRoot
	interval time.Duration
	ids      *identities

	mu    sync.Mutex
	named map[int]bool        // PIDs the connector named since the last rescan
	exits map[int]time.Time   // when the connector saw each PID's process end
	young map[int]int         // PID -> rescans left while it counts as young
	using map[string]*tracked // by PID@START
	seen  map[int]bool        // every PID of the last listing; nil before the first
	sweep int
}

func newFallbackSource(proc *capture.ProcRoot, interval time.Duration) *fallbackSource {
	return &fallbackSource{proc: proc, interval: interval, ids: newIdentities(proc),
		named: map[int]bool{}, exits: map[int]time.Time{}, young: map[int]int{}, using: map[string]*tracked{}}
}

// listen subscribes to the proc connector; where the kernel refuses, the
// rescan alone runs, and the reason is returned for the watch_start record.
func (f *fallbackSource) listen(ctx context.Context, lost func(string)) error {
	c, err := openConnector()
	if err != nil {
		return fmt.Errorf("proc connector: %w", err)
	}
	go func() {
		<-ctx.Done()
		c.close()
	}()
	go func() {
		err := c.read(f.note, func(why string) { lost("proc connector: " + why) })
		if ctx.Err() == nil {
			lost(fmt.Sprintf("proc connector: %v", err))
		}
	}()
	return nil
}

func (f *fallbackSource) note(e procEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch e.what {
	case procEventExec, procEventFork:
		f.named[e.tgid] = true
	case procEventExit:
		if e.pid == e.tgid {
			f.exits[e.tgid] = time.Now()
		}
	}
}

// rescan reads the processes to look at now and emits what changed: a
// process newly using a device, and the end of one that did.
func (f *fallbackSource) rescan(ctx context.Context, emit func(...eventlog.Event)) error {
	pids, err := f.proc.PIDs()
	if err != nil {
		return fmt.Errorf("proc root: %w", err)
	}
	now := time.Now()
	f.mu.Lock()
	want := map[int]bool{}
	for pid := range f.named {
		want[pid] = true
	}
	clear(f.named)
	exits := f.exits
	f.exits = map[int]time.Time{}
	f.mu.Unlock()

	current := make(map[int]bool, len(pids))
	// The first rescan reads every process once, to find the device users
	// already running; after it, those processes are old, not young.
	first := f.seen == nil
	for i, pid := range pids {
		current[pid] = true
		if !first && !f.seen[pid] {
			f.young[pid] = youngTicks
		}
		if first || i%sweepTicks == f.sweep {
			want[pid] = true
		}
	}
	f.sweep = (f.sweep + 1) % sweepTicks
	for pid, left := range f.young {
		if left <= 0 || !current[pid] {
			delete(f.young, pid)
			continue
		}
		f.young[pid] = left - 1
		want[pid] = true
	}
	for _, t := range f.using {
		want[t.proc.PID] = true
	}
	f.seen = current
	list := make([]int, 0, len(want))
	for pid := range want {
		if current[pid] {
			list = append(list, pid)
		}
	}
	slices.Sort(list)
	procs, err := f.proc.Processes(ctx, list)
	if err != nil {
		return err
	}
	alive := make(map[string]bool, len(procs))
	for i := range procs {
		sp := &procs[i]
		if !sp.UsesNVIDIA() || sp.Defunct() {
			continue
		}
		key := sp.Key()
		alive[key] = true
		t := f.using[key]
		if t == nil {
			t = &tracked{proc: fromSnapshot(sp, f.ids), devices: map[string]bool{}}
			f.using[key] = t
		}
		for _, ev := range usesOf(sp, t.proc, now) {
			sig := ev.Device.Path + " " + ev.Access + ev.Perms
			if !t.devices[sig] {
				t.devices[sig] = true
				emit(ev)
			}
		}
	}
	for key, t := range f.using {
		if alive[key] {
			continue
		}
		delete(f.using, key)
		at, ok := exits[t.proc.PID]
		source := eventlog.SourceProcConnector
		if !ok {
			at, source = now, eventlog.SourceRescan
		}
		emit(eventlog.Event{Time: at, Kind: eventlog.KindExit, Source: source, Process: clone(t.proc),
			Note: "gone at this rescan (the time is when it was found gone, unless the proc connector saw the exit)"})
	}
	return nil
}

// fromSnapshot names a process as a snapshot read it.
func fromSnapshot(sp *snapshot.Process, ids *identities) *eventlog.Process {
	p := &eventlog.Process{PID: sp.PID, StartTime: sp.StartTime, PPID: sp.PPID, Comm: sp.Comm, Exe: sp.Exe, ExeDeleted: sp.ExeDeleted,
		UID: sp.UID, ContainerID: sp.ContainerID, PodUID: sp.PodUID, SlurmJobID: sp.SlurmJobID}
	if n := len(sp.NSpid); n > 1 {
		p.NSPID = sp.NSpid[n-1]
	}
	for _, line := range sp.Cgroups {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			p.Cgroup = rest
		}
	}
	return p
}

// usesOf returns a "using" event for each NVIDIA device a process holds or maps.
func usesOf(sp *snapshot.Process, p *eventlog.Process, at time.Time) []eventlog.Event {
	var out []eventlog.Event
	for _, h := range sp.Holders {
		if h.Class != snapshot.ClassNVIDIA {
			continue
		}
		fd := h.FD
		out = append(out, eventlog.Event{Time: at, Kind: eventlog.KindUsing, Source: eventlog.SourceRescan, Process: clone(p), FD: &fd, Access: h.Access,
			Device: &eventlog.Device{Path: h.Target, Number: h.DeviceNumber.String(), Type: h.DeviceType, Class: h.Class, GPU: h.GPUMinor}})
	}
	for _, m := range sp.Mappings {
		if m.Class != snapshot.ClassNVIDIA {
			continue
		}
		out = append(out, eventlog.Event{Time: at, Kind: eventlog.KindUsing, Source: eventlog.SourceRescan, Process: clone(p), Perms: m.Perms, Length: m.Size,
			Device: &eventlog.Device{Path: m.Path, Number: m.DeviceNumber.String(), Type: m.DeviceType, Class: m.Class, GPU: m.GPUMinor}})
	}
	return out
}
