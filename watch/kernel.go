package watch

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/bpf"
	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

// kernelSource turns what the BPF programs report into events.
type kernelSource struct {
	w       *bpf.Watch
	source  string
	ids     *identities
	classes snapshot.DeviceClasses
	// bootBase is the wall-clock time of boot, to date CLOCK_BOOTTIME stamps.
	bootBase time.Time
	// runs are the first events of the kernel's runs of like events, by
	// process and run. A run's record names only its run (bpf.Event.Run).
	runs map[runKey]eventlog.Event
}

// runKey names one run of one process.
type runKey struct {
	pid   int
	start uint64
	run   uint32
}

// maxRuns bounds the runs kept to twice what the kernel counts at a time
// (runs end with their process's exec or exit), against exits not read. Past
// it they are all let go, and a run's record then finds no first event and
// is recorded as a loss.
const maxRuns = 2 * bpf.RunsProcs * int(bpf.Runs)

// blindSpots says what each hook cannot see.
var blindSpots = map[bpf.Hook][]string{
	bpf.HookLSM:        {eventlog.BlindBeforeStart},
	bpf.HookFentry:     {eventlog.BlindBeforeStart, eventlog.BlindMappingSize},
	bpf.HookKprobe:     {eventlog.BlindBeforeStart, eventlog.BlindMappingSize},
	bpf.HookTracepoint: {eventlog.BlindKernelOpens, eventlog.BlindFixedSlot, eventlog.BlindBeforeStart},
}

// unattachedBlind is what the tracepoint mode cannot see where the kernel
// lacks tracepoint tp.
func unattachedBlind(tp string) string {
	if tp == "io_uring_complete" {
		return "opens through io_uring (no io_uring_complete tracepoint on this kernel)"
	}
	return "the " + strings.TrimPrefix(tp, "sys_exit_") + " system call (no " + tp + " tracepoint on this kernel)"
}

func newKernelSource(w *bpf.Watch, proc *capture.ProcRoot) *kernelSource {
	return &kernelSource{w: w, source: string(w.Hook), ids: newIdentities(proc), classes: proc.Classes(), bootBase: bootBase(), runs: map[runKey]eventlog.Event{}}
}

// bootBase is the wall-clock time at which CLOCK_BOOTTIME was zero.
func bootBase() time.Time {
	var ts unix.Timespec
	now := time.Now()
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return time.Time{}
	}
	return now.Add(-time.Duration(ts.Nano()))
}

// run reads events until the watch is stopped and the ring buffer drained,
// then records what the kernel's runs counted since their last records.
func (k *kernelSource) run(emit func(...eventlog.Event)) error {
	for {
		e, err := k.w.Read()
		if errors.Is(err, bpf.ErrStopped) {
			counted, err := k.w.Counted()
			for i := range counted {
				k.handle(&counted[i], emit)
			}
			return err
		}
		if errors.Is(err, bpf.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		k.handle(&e, emit)
	}
}

func (k *kernelSource) handle(e *bpf.Event, emit func(...eventlog.Event)) {
	at := k.bootBase.Add(time.Duration(e.TimeNS))
	start := capture.TicksOf(e.StartNS)
	switch e.Kind {
	case bpf.KindExec:
		// The kernel reports the exec of a device user only. Its descriptors
		// may live on in the new program.
		p, _ := k.process(e, start)
		k.endRuns(p) // the kernel sent their records before the exec
		p.Exe, p.ExeDeleted = e.Exe, false
		if kept := k.ids.lookup(p.PID, p.StartTime); kept != nil {
			kept.Exe, kept.ExeDeleted, kept.Comm = p.Exe, false, p.Comm
		}
		emit(eventlog.Event{Time: at, Kind: eventlog.KindExec, Source: k.source, Process: p})
	case bpf.KindOpen, bpf.KindMmap:
		if e.Count > 0 {
			k.runRecord(e, at, start, emit)
			return
		}
		dev := k.device(e)
		if dev.Class != snapshot.ClassNVIDIA {
			return
		}
		p, exec := k.process(e, start)
		ev := eventlog.Event{Time: at, Source: k.source, Process: p, Device: dev}
		if e.FD >= 0 {
			fd := int(e.FD)
			ev.FD = &fd
		}
		if e.Kind == bpf.KindOpen {
			ev.Kind = eventlog.KindOpen
			ev.Access, _ = procfs.AccessMode(uint64(e.Flags))
		} else {
			ev.Kind, ev.Perms, ev.Length = eventlog.KindMmap, mmapPerms(e.Prot, e.Flags), e.Length
		}
		k.ids.used(p.Key(), &ev)
		if e.Run > 0 {
			if len(k.runs) >= maxRuns {
				clear(k.runs)
			}
			k.runs[runKey{p.PID, p.StartTime, e.Run}] = ev
		}
		if exec != nil {
			emit(*exec, ev)
		} else {
			emit(ev)
		}
	case bpf.KindFork:
		p, _ := k.process(e, start)
		child := clone(p)
		child.PID, child.StartTime, child.PPID, child.NSPID = int(e.ChildPID), capture.TicksOf(e.ChildStartNS), p.PID, 0
		k.ids.keep(child)
		// The child is a device user from its fork on. A process that forks
		// and exits at every turn is one at each of its PIDs, and all of
		// them are one lineage.
		root, inherits := k.ids.inherit(p, child, at, k.source)
		emit(append([]eventlog.Event{{Time: at, Kind: eventlog.KindFork, Source: k.source, Process: p, Child: clone(child), Lineage: root}},
			inherits...)...)
	case bpf.KindExit:
		p, _ := k.process(e, start)
		k.endRuns(p)
		code := int(e.Flags)
		emit(eventlog.Event{Time: at, Kind: eventlog.KindExit, Source: k.source, Process: p, ExitCode: &code, Lineage: k.ids.forget(p)})
	}
}

// runRecord records a kernel run's record as the run's first event, standing
// for Count like events from FirstNS to the record's time. Where that first
// event was not read, the count is recorded as a loss, since the events are
// known and the device they were of is not.
func (k *kernelSource) runRecord(e *bpf.Event, at time.Time, start uint64, emit func(...eventlog.Event)) {
	p, _ := k.process(e, start)
	ev, ok := k.runs[runKey{p.PID, p.StartTime, e.Run}]
	if !ok {
		emit(eventlog.Event{Time: at, Kind: eventlog.KindLost, Source: k.source, Process: p,
			Note: strconv.FormatUint(e.Count, 10) + " like opens or mappings counted in a run whose first event was not read"})
		return
	}
	ev.Process, ev.FD = p, nil
	ev.Time, ev.Last, ev.Count = k.bootBase.Add(time.Duration(e.FirstNS)), at, e.Count
	emit(ev)
}

// endRuns lets go of a process's runs, at its exec and exit.
func (k *kernelSource) endRuns(p *eventlog.Process) {
	for run := range bpf.Runs {
		delete(k.runs, runKey{p.PID, p.StartTime, run + 1})
	}
}

// process returns the identity of the process an event came from, and, the
// first time it is seen using a device, its exec (dated by the kernel) where
// it exec'd since it started.
func (k *kernelSource) process(e *bpf.Event, start uint64) (*eventlog.Process, *eventlog.Event) {
	if p := k.ids.lookup(int(e.PID), start); p != nil {
		p.Comm, p.UID = e.Comm, int(e.UID)
		return clone(p), nil
	}
	p := &eventlog.Process{PID: int(e.PID), StartTime: start, PPID: int(e.PPID), Comm: e.Comm, UID: int(e.UID), CgroupID: e.CgroupID}
	if e.NSPID != e.PID {
		p.NSPID = int(e.NSPID)
	}
	k.ids.fill(p, e.Exe)
	k.ids.keep(p)
	var exec *eventlog.Event
	if e.ExecNS != 0 {
		exec = &eventlog.Event{Time: k.bootBase.Add(time.Duration(e.ExecNS)), Kind: eventlog.KindExec, Source: k.source, Process: clone(p)}
	}
	return clone(p), exec
}

// device classifies the device an open or mapping was of, with the
// snapshot's classifier, since the kernel's filter only narrowed it down.
func (k *kernelSource) device(e *bpf.Event) *eventlog.Device {
	kind := snapshot.FileKind{Device: true, Char: e.Char(), Major: e.Major, Minor: e.Minor}
	class, gpu := k.classes.Classify(e.Path, kind, true)
	typ := "block"
	if e.Char() {
		typ = "char"
	}
	return &eventlog.Device{Path: e.Path, Number: strconv.FormatUint(uint64(e.Major), 10) + ":" + strconv.FormatUint(uint64(e.Minor), 10),
		Type: typ, Class: class, GPU: gpu}
}

func clone(p *eventlog.Process) *eventlog.Process {
	c := *p
	return &c
}

// mmapPerms writes a mapping's protection and sharing as maps prints them.
func mmapPerms(prot, flags uint32) string {
	b := []byte("---p")
	if prot&unix.PROT_READ != 0 {
		b[0] = 'r'
	}
	if prot&unix.PROT_WRITE != 0 {
		b[1] = 'w'
	}
	if prot&unix.PROT_EXEC != 0 {
		b[2] = 'x'
	}
	if t := flags & unix.MAP_TYPE; t == unix.MAP_SHARED || t == unix.MAP_SHARED_VALIDATE {
		b[3] = 's'
	}
	return string(b)
}
