package diff

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

// maxTransientEvidence bounds the event lines a finding carries, since a
// tenant can open a device as often as it likes.
const maxTransientEvidence = 32

// eventUse is one process's uses of one NVIDIA device (or of a GPU NVML
// listed it on) in the window, as the event log recorded them. Or it is a
// lineage's inherits of one (a device user's descendants, recorded by
// lineage), proc then the last process of it and first the first.
type eventUse struct {
	proc        *eventlog.Process
	first       *eventlog.Process
	lineage     string
	device      string
	gpu         string
	events      []*eventlog.Event // the first maxTransientEvidence
	count       uint64            // events, kept in events or not, each record its count
	writable    bool
	lineageProc uint64 // the processes of the lineage's records
}

// windowUses groups the event log's uses of NVIDIA devices in the window
// (the window's start to TO's capture end) by process and device, of the
// events keep accepts, in the order of their first event.
func (c *comparison) windowUses(keep func(*eventlog.Event) bool) []*eventUse {
	uses := map[string]*eventUse{} // PID@START NUL device NUL GPU
	var order []*eventUse
	c.eachEvent(func(e *eventlog.Event) {
		if !e.UsesDevice() || e.Process == nil || e.Process.StartTime == 0 && e.Kind == eventlog.KindNVML {
			return
		}
		if e.Device != nil && e.Device.Class != snapshot.ClassNVIDIA {
			return
		}
		if !e.Time.Before(c.windowEnd()) || e.Time.Before(c.since) || !keep(e) {
			return
		}
		dev := ""
		if e.Device != nil {
			dev = e.Device.Path
		}
		owner := e.Process.Key()
		if e.Kind == eventlog.KindInherit && e.Lineage != "" {
			owner = "lineage " + e.Lineage // a process that hops PIDs is one use, not one per PID
		}
		id := owner + "\x00" + dev + "\x00" + e.GPUUUID
		u := uses[id]
		if u == nil {
			// The GPU is NVML's, or the one the device node names.
			gpu := e.GPUUUID
			if gpu == "" && e.Device != nil {
				gpu = c.gpuUUID(e.Device.GPU)
			}
			u = &eventUse{proc: e.Process, device: dev, gpu: gpu}
			uses[id] = u
			order = append(order, u)
		}
		// The evidence's events are kept and the rest counted, since a
		// tenant decides how many there are.
		if len(u.events) < maxTransientEvidence {
			u.events = append(u.events, e)
		}
		u.count += max(e.Count, 1)
		if owner != e.Process.Key() {
			u.noteLineage(e)
		}
		u.writable = u.writable || e.Perms != "" && e.Writable() // a writable mapping, made, found or inherited
	})
	return order
}

// noteLineage takes a lineage's inherit record into u. The use is named by
// the lineage's last process, and says its first.
func (u *eventUse) noteLineage(e *eventlog.Event) {
	if u.first == nil {
		u.first = cmp.Or(e.First, e.Process)
	}
	u.lineage, u.proc = e.Lineage, e.Process
	u.lineageProc += max(e.Count, 1)
}

// evidence quotes the uses' events (the first maxTransientEvidence, then a
// count), the lineage it is of, and the process's masquerade evidence.
func (u *eventUse) evidence() []string {
	var out []string
	if u.lineage != "" {
		out = append(out, fmt.Sprintf("a lineage of %d processes descending from device user %s inherited the device, from %s to %s (one record per second of hops: watch coalesces a lineage's forks)",
			u.lineageProc, u.lineage, u.first.Key(), u.proc.Key()))
	}
	for _, e := range u.events {
		out = append(out, "event: "+eventEvidence(e))
	}
	if n := uint64(len(u.events)); u.count > n {
		out = append(out, fmt.Sprintf("and %d more events", u.count-n))
	}
	if u.writable {
		out = append(out, "a writable mapping of the device")
	}
	return append(out, eventMasquerade(u.proc)...)
}

// eventTransients are the transient processes the event log of gpusnap
// watch shows opening or mapping an NVIDIA device (or listed by NVML)
// between FROM and TO, and gone at TO. There is one finding per process and
// device, high with masquerade evidence or a writable mapping, else medium.
func (c *comparison) eventTransients() []Finding {
	if c.opts.Events == nil {
		return nil
	}
	exits := map[string]*eventlog.Event{}
	uses := c.windowUses(func(e *eventlog.Event) bool {
		p := c.toByKey[idOf(e.Process.PID, e.Process.StartTime)]
		return p == nil || p.Defunct() // alive at TO, so the snapshot rules and hiddenDeviceUses say what it holds
	})
	c.eachEvent(func(e *eventlog.Event) {
		if e.Kind == eventlog.KindExit && e.Process != nil {
			exits[e.Process.Key()] = e
		}
	})
	var out []Finding
	for _, u := range uses {
		ref := eventProcessRef(u.proc)
		sev := Medium
		if len(eventMasquerade(u.proc)) > 0 || u.writable {
			sev = High
		}
		what := "used " + cmp.Or(u.device, "a GPU")
		if u.device == "" && u.gpu != "" {
			what = "was listed by NVML on " + u.gpu
		}
		ended := "is gone at TO"
		if x := exits[u.proc.Key()]; x != nil {
			ended = "ended at " + x.Time.UTC().Format("15:04:05.000") + " UTC"
		} else if hiddenAt(c.to, snapshot.HiddenProcess{PID: u.proc.PID, StartTime: u.proc.StartTime}) != nil {
			ended = "is hidden from /proc at TO, though the kernel still has its PID"
		}
		out = append(out, Finding{
			Kind:     KindTransientGPUProcess,
			Severity: sev,
			Summary:  fmt.Sprintf("%s %s between the snapshots and %s", describe(ref), what, ended),
			Process:  ref,
			Device:   u.device,
			GPUUUID:  u.gpu,
			Evidence: u.evidence(),
		})
	}
	return out
}

// eventMasquerade is masquerade's evidence of a process as the event log
// recorded it.
func eventMasquerade(p *eventlog.Process) []string {
	return masquerade(&snapshot.Process{Comm: p.Comm, Exe: p.Exe, ExeDeleted: p.ExeDeleted})
}

// eventProcessRef names a process as the event log recorded it.
func eventProcessRef(p *eventlog.Process) *ProcessRef {
	return &ProcessRef{PID: p.PID, StartTime: p.StartTime, Comm: p.Comm, Exe: p.Exe, ExeDeleted: p.ExeDeleted,
		UID: p.UID, Cgroup: p.Cgroup, ContainerID: p.ContainerID, PodUID: p.PodUID, SlurmJobID: p.SlurmJobID}
}

// eventEvidence is one event as a finding's evidence line.
func eventEvidence(e *eventlog.Event) string {
	parts := []string{e.Time.UTC().Format("2006-01-02T15:04:05.000000Z"), e.Kind}
	if e.Source != "" {
		parts = append(parts, "("+e.Source+")")
	}
	if e.Device != nil {
		parts = append(parts, e.Device.Path, e.Device.Number)
	}
	parts = append(parts, e.Access, e.Perms)
	if e.Length > 0 {
		parts = append(parts, fmt.Sprintf("%d bytes", e.Length))
	}
	if e.GPUUUID != "" {
		parts = append(parts, e.GPUUUID)
	}
	if e.Count > 1 {
		parts = append(parts, fmt.Sprintf("(%d like events to %s)", e.Count, e.Last.UTC().Format("15:04:05.000000Z")))
	}
	return strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), " ")
}

// eachEvent walks the window's events. A walk that fails (the log
// removed meanwhile) is said, once per walk, and the window is not complete.
func (c *comparison) eachEvent(fn func(*eventlog.Event)) {
	if c.opts.Events == nil {
		return
	}
	if err := c.opts.Events.Each(func(e *eventlog.Event) bool { fn(e); return true }); err != nil {
		c.notCompared("the event log could not be read again: " + err.Error())
	}
}

// forkIndex maps each child the event log saw forked by a device user to its parent.
func (c *comparison) forkIndex() (parents map[string]*eventlog.Event, users map[string]*eventlog.Event) {
	parents, users = map[string]*eventlog.Event{}, map[string]*eventlog.Event{}
	c.eachEvent(func(e *eventlog.Event) {
		switch {
		case e.Kind == eventlog.KindFork && e.Child != nil && e.Process != nil:
			parents[e.Child.Key()] = e
		case (e.Kind == eventlog.KindOpen || e.Kind == eventlog.KindMmap) && e.Process != nil:
			if users[e.Process.Key()] == nil {
				users[e.Process.Key()] = e
			}
		}
	})
	return parents, users
}

// eventAncestor finds, in the event log, the device user a process was
// forked from (directly or through forks), or nil.
func eventAncestor(key string, parents, users map[string]*eventlog.Event) (fork, use *eventlog.Event) {
	for range 64 { // a fork chain a tenant made, so bounded
		f := parents[key]
		if f == nil {
			return nil, nil
		}
		if u := users[f.Process.Key()]; u != nil {
			return f, u
		}
		key = f.Process.Key()
	}
	return nil, nil
}
