package diff

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

// maxTransientEvidence bounds the event lines a finding carries: a tenant
// can open a device as often as it likes.
const maxTransientEvidence = 32

// eventTransients are the transient processes the event log shows (gpusnap
// watch): opening or mapping an NVIDIA device (or listed by NVML) between
// FROM and TO, and gone at TO. One finding per process and device; high with
// masquerade evidence or a writable mapping, else medium.
func (c *comparison) eventTransients() []Finding {
	if c.opts.Events == nil {
		return nil
	}
	type use struct {
		proc     *eventlog.Process
		device   string
		gpu      string
		events   []*eventlog.Event
		count    int // events, kept in events or not
		writable bool
	}
	uses := map[string]*use{} // PID@START NUL device
	var order []string
	exits := map[string]*eventlog.Event{}
	c.eachEvent(func(e *eventlog.Event) {
		if e.Kind == eventlog.KindExit && e.Process != nil {
			exits[e.Process.Key()] = e
		}
		if !e.UsesDevice() || e.Process == nil || e.Process.StartTime == 0 && e.Kind == eventlog.KindNVML {
			return
		}
		if e.Device != nil && e.Device.Class != snapshot.ClassNVIDIA {
			return
		}
		if !e.Time.Before(c.windowEnd()) || e.Time.Before(c.from.Host.CaptureStart) {
			return
		}
		key := e.Process.Key()
		if p := c.toByKey[key]; p != nil && !p.Defunct() {
			return // alive at TO: the snapshot rules say what it holds
		}
		dev := ""
		if e.Device != nil {
			dev = e.Device.Path
		}
		id := key + "\x00" + dev + "\x00" + e.GPUUUID
		u := uses[id]
		if u == nil {
			// The GPU: NVML's, or the one the device node names.
			gpu := e.GPUUUID
			if gpu == "" && e.Device != nil {
				gpu = c.gpuUUID(e.Device.GPU)
			}
			u = &use{proc: e.Process, device: dev, gpu: gpu}
			uses[id] = u
			order = append(order, id)
		}
		// The evidence's events are kept, the rest counted: a tenant
		// decides how many there are.
		if len(u.events) < maxTransientEvidence {
			u.events = append(u.events, e)
		}
		u.count++
		u.writable = u.writable || e.Kind == eventlog.KindMmap && e.Writable() || e.Kind == eventlog.KindUsing && len(e.Perms) > 1 && e.Perms[1] == 'w'
	})
	var out []Finding
	for _, id := range order {
		u := uses[id]
		ref := eventProcessRef(u.proc)
		signs := eventMasquerade(u.proc)
		sev := Medium
		if len(signs) > 0 || u.writable {
			sev = High
		}
		what := "used " + cmp.Or(u.device, "a GPU")
		if u.device == "" && u.gpu != "" {
			what = "was listed by NVML on " + u.gpu
		}
		ended := "is gone at TO"
		if x := exits[u.proc.Key()]; x != nil {
			ended = "ended at " + x.Time.UTC().Format("15:04:05.000") + " UTC"
		}
		f := Finding{
			Kind:     KindTransientGPUProcess,
			Severity: sev,
			Summary:  fmt.Sprintf("%s %s between the snapshots and %s", describe(ref), what, ended),
			Process:  ref,
			Device:   u.device,
			GPUUUID:  u.gpu,
		}
		for _, e := range u.events {
			f.Evidence = append(f.Evidence, "event: "+eventEvidence(e))
		}
		if u.count > len(u.events) {
			f.Evidence = append(f.Evidence, fmt.Sprintf("and %d more events", u.count-len(u.events)))
		}
		if u.writable {
			f.Evidence = append(f.Evidence, "a writable mapping of the device")
		}
		f.Evidence = append(f.Evidence, signs...)
		out = append(out, f)
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
	return strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), " ")
}

// noteCoverage says where the event log does not cover the window: a
// transient process then may have gone unseen.
func (c *comparison) noteCoverage() {
	if c.opts.Events == nil {
		return
	}
	cov, err := eventlog.CoverSource(c.opts.Events, c.from.Host.CaptureStart, c.to.Host.CaptureStart)
	if err != nil {
		c.notCompared("the event log could not be read again: " + err.Error())
	}
	for _, g := range cov.Gaps {
		c.notCompared("no gpusnap watch recorded from " + g.String() + ": a process that used a GPU then and left is not known")
	}
	if cov.Lost > 0 {
		c.notCompared(fmt.Sprintf("the kernel dropped %d watch events in the window: transient processes may be missing", cov.Lost))
	}
	if slices.Contains(cov.Modes, eventlog.ModeFallback) {
		// A rescan every --interval sees a process only while it holds or maps a device then.
		c.notCompared("gpusnap watch ran in its fallback mode in the window (a /proc rescan each interval, no kernel hooks): a process that used a GPU for less than an interval may not be known")
	}
}

// eachEvent walks the window's events; a walk that fails (the log
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
	for range 64 { // a fork chain a tenant made: bounded
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
