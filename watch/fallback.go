package watch

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

// The fallback, where BPF cannot load, sees a device only while a process
// holds or maps it. Each interval it reads the processes the proc connector
// named (a new process, an exec, a new thread), the young, the device users
// and a rotating share of the rest. After a loss the connector reports, it
// reads every process once.

const (
	// A process started or named in the last youngTicks intervals is read
	// every interval.
	youngTicks = 10
	// While the connector is heard, the share read each interval makes every
	// process in heardSweep intervals. /proc is listed once in that time,
	// since listing it costs more than the reads.
	heardSweep = 600
	// Where the connector is refused or fails, /proc is listed every
	// interval, and every process is read in deafSweep intervals.
	deafSweep = 60
	// maxNamed bounds the PIDs and exits kept between two rescans. Past it
	// (a fork storm) named PIDs count as lost, and exits are dated by the
	// rescan.
	maxNamed = 1 << 16
)

// fallbackBlind is what the fallback cannot see. refused says why the proc
// connector is not heard (nil where it is).
func fallbackBlind(refused error) []string {
	b := []string{
		"opens and mappings themselves: a device is seen only while a process holds or maps it at a rescan",
		"a process that holds a device for less than --interval",
	}
	if refused == nil {
		return append(b, fmt.Sprintf("a process that takes a device more than %d intervals after it started or exec'd, "+
			"and starts no thread after: found by the rotating sweep, within %d intervals", youngTicks, heardSweep))
	}
	return append(b, fmt.Sprintf("a process older than %d intervals that takes a device: found by the rotating sweep, within %d intervals", youngTicks, deafSweep),
		"exits between rescans ("+refused.Error()+"): an exit is dated by the rescan that found the process gone")
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
	lost     func(string) // records a loss of the connector's, set by listen

	mu      sync.Mutex
	heard   bool              // the connector is subscribed and reading
	named   map[int]bool      // PIDs the connector named since the last rescan, true for a new process or an exec
	exits   map[int]time.Time // when the connector saw each PID's process end
	losses  int               // losses the connector reported since the last rescan
	lossWhy string            // the first of them

	// Only rescans touch these.
	young map[int]time.Time   // PID -> until when it is read every interval
	using map[string]*tracked // by PID@START
	known map[int]bool        // the sweep's PIDs (the last listing and those named since), nil before the first rescan
	sweep int
}

func newFallbackSource(proc *capture.ProcRoot, interval time.Duration) *fallbackSource {
	return &fallbackSource{proc: proc, interval: interval, ids: newIdentities(proc),
		named: map[int]bool{}, exits: map[int]time.Time{}, young: map[int]time.Time{}, using: map[string]*tracked{}}
}

// listen subscribes to the proc connector. Where the kernel refuses, the
// rescans list /proc every interval, and the reason is returned for the
// watch_start record. lost records each loss the connector reports.
func (f *fallbackSource) listen(ctx context.Context, lost func(string)) error {
	c, err := openConnector()
	if err != nil {
		return fmt.Errorf("proc connector: %w", err)
	}
	f.mu.Lock()
	f.heard, f.lost = true, lost
	f.mu.Unlock()
	go func() {
		<-ctx.Done()
		c.close()
	}()
	go func() {
		err := c.read(f.note, func(why string) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.loss(why)
		})
		if ctx.Err() == nil {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.heard = false
			f.loss(fmt.Sprintf("reading it failed (%v): /proc is listed every interval from now on", err))
		}
	}()
	return nil
}

// loss notes a loss of the connector's. The caller holds mu.
func (f *fallbackSource) loss(why string) {
	if f.losses == 0 {
		f.lossWhy = why
	}
	f.losses++
}

func (f *fallbackSource) note(e procEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch e.what {
	case procEventFork:
		// A new process is young. A new thread names its process, which may
		// have taken a device since it was last read (a CUDA runtime starts
		// threads once it has opened the device).
		f.name(e.tgid, e.pid == e.tgid)
	case procEventExec:
		f.name(e.tgid, true)
	case procEventExit:
		if e.pid == e.tgid && len(f.exits) < maxNamed {
			f.exits[e.tgid] = time.Now()
		}
	}
}

// name keeps pid for the next rescan. The caller holds mu.
func (f *fallbackSource) name(pid int, young bool) {
	if _, ok := f.named[pid]; !ok && len(f.named) >= maxNamed {
		f.loss(fmt.Sprintf("more than %d processes named between two rescans", maxNamed))
		return
	}
	f.named[pid] = f.named[pid] || young
}

// rescan reads the processes to look at now and emits what changed, a
// process newly using a device and the end of one that did.
func (f *fallbackSource) rescan(ctx context.Context, emit func(...eventlog.Event)) error {
	now := time.Now()
	f.mu.Lock()
	named, exits, losses, why, heard := f.named, f.exits, f.losses, f.lossWhy, f.heard
	f.named, f.exits, f.losses, f.lossWhy = map[int]bool{}, map[int]time.Time{}, 0, ""
	f.mu.Unlock()
	if losses > 0 {
		f.lost(fmt.Sprintf("proc connector: %s (%d losses since the last rescan); this rescan reads every process", why, losses))
	}
	list, err := f.choose(named, losses > 0, heard, now)
	if err != nil {
		return err
	}
	procs, err := f.proc.Processes(ctx, list)
	if err != nil {
		return err
	}
	f.forget(list, procs)
	alive := f.track(procs, named, now, emit)
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

// choose returns, sorted, the PIDs to read. They are those named, the young,
// the device users and this interval's share of the rest, or every process
// on a full rescan (the first, and the one after a loss).
func (f *fallbackSource) choose(named map[int]bool, full, heard bool, now time.Time) ([]int, error) {
	slots := deafSweep
	if heard {
		slots = heardSweep
	}
	f.sweep = (f.sweep + 1) % slots
	full = full || f.known == nil
	want := map[int]bool{}
	if full || !heard || f.sweep == 0 {
		pids, err := f.proc.PIDs()
		if err != nil {
			return nil, fmt.Errorf("proc root: %w", err)
		}
		listed := make(map[int]bool, len(pids))
		for _, pid := range pids {
			listed[pid] = true
			if full || !f.known[pid] {
				want[pid] = true // new since the last listing, and not named
			}
		}
		f.known = listed
	}
	for pid := range named {
		want[pid], f.known[pid] = true, true
	}
	for pid, until := range f.young {
		if now.After(until) {
			delete(f.young, pid)
		} else {
			want[pid] = true
		}
	}
	for _, t := range f.using {
		want[t.proc.PID] = true
	}
	for pid := range f.known {
		if pid%slots == f.sweep {
			want[pid] = true
		}
	}
	return slices.Sorted(maps.Keys(want)), nil
}

// forget drops from the sweep and the young the PIDs read and found gone.
func (f *fallbackSource) forget(list []int, procs []snapshot.Process) {
	found := make(map[int]bool, len(procs))
	for i := range procs {
		found[procs[i].PID] = true
	}
	for _, pid := range list {
		if !found[pid] {
			delete(f.known, pid)
			delete(f.young, pid)
		}
	}
}

// track keeps young the processes read that were named young or started
// in the last youngTicks intervals, emits each device use not seen before,
// and returns the device users read, by PID@START.
func (f *fallbackSource) track(procs []snapshot.Process, named map[int]bool, now time.Time, emit func(...eventlog.Event)) map[string]bool {
	span := youngTicks * f.interval
	alive := make(map[string]bool, len(procs))
	for i := range procs {
		sp := &procs[i]
		until := sp.Started.Add(span)
		if named[sp.PID] {
			until = now.Add(span)
		}
		if until.After(now) && until.After(f.young[sp.PID]) {
			f.young[sp.PID] = until
		}
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
	return alive
}

// fromSnapshot names a process as a snapshot read it.
func fromSnapshot(sp *snapshot.Process, ids *identities) *eventlog.Process {
	p := &eventlog.Process{PID: sp.PID, StartTime: sp.StartTime, PPID: sp.PPID, Comm: sp.Comm, Exe: sp.Exe, ExeDeleted: sp.ExeDeleted,
		UID: sp.UID, ContainerID: sp.ContainerID, PodUID: sp.PodUID, SlurmJobID: sp.SlurmJobID,
		OwnerCgroups: sp.OwnerCgroups}
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
