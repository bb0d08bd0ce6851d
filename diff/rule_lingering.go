package diff

import (
	"cmp"
	"fmt"

	"github.com/gpusnap/gpusnap/eventlog"
)

// lingeringUsers (check only) reports a process the window's event log shows
// use a GPU checked, gone now, whose kin still runs (liveKin), as a high
// transient_gpu_process, since a holder can let go of a GPU while it is checked
// and have its kin take it again after.
func (c *comparison) lingeringUsers(gpus *gpuSet) []Finding {
	if !c.check || c.opts.Events == nil {
		return nil
	}
	uses := c.windowUses(func(e *eventlog.Event) bool {
		if p := c.toByKey[idOf(e.Process.PID, e.Process.StartTime)]; p != nil && !p.Defunct() {
			return false
		}
		if e.Device == nil {
			return gpus.all || gpus.uuids[e.GPUUUID]
		}
		return gpus.hasDevice(&deviceUse{class: e.Device.Class, gpuMinor: e.Device.GPU})
	})
	if len(uses) == 0 {
		return nil
	}
	children := map[string][]*eventlog.Process{} // by the parent's PID@START
	c.eachEvent(func(e *eventlog.Event) {
		if e.Kind == eventlog.KindFork && e.Process != nil && e.Child != nil {
			children[e.Process.Key()] = append(children[e.Process.Key()], e.Child)
		}
	})
	var out []Finding
	for _, u := range uses {
		kin := c.liveKin(u.proc, children[u.proc.Key()])
		if kin == "" {
			continue
		}
		ref := eventProcessRef(u.proc)
		out = append(out, Finding{
			Kind:     KindTransientGPUProcess,
			Severity: High,
			Summary: fmt.Sprintf("%s used %s in the window and is gone now, while %s: what let go of the GPU may take it again once it is handed out",
				describe(ref), cmp.Or(u.device, u.gpu, "a GPU"), kin),
			Process:  ref,
			Device:   u.device,
			GPUUUID:  u.gpu,
			Evidence: append(u.evidence(), "now: "+kin),
		})
	}
	return out
}

// liveKin names a live process of p's kin, "" for none. Kin are its parent
// of its uid, a child the log saw it fork, or, for a uid other than root
// owned by no job, pod or container, one such of its uid. Root always runs
// something, and a job's user runs other jobs, so neither uid counts alone.
func (c *comparison) liveKin(p *eventlog.Process, children []*eventlog.Process) string {
	if parent := c.toByPID[p.PPID]; p.PPID > 1 && parent != nil && !parent.Defunct() && parent.StartTime <= p.StartTime && parent.UID == p.UID {
		return fmt.Sprintf("its parent %s (%s) of the same uid %d lives", parent.Key(), parent.Comm, p.UID)
	}
	for _, ch := range children {
		if q := c.toByKey[idOf(ch.PID, ch.StartTime)]; q != nil && !q.Defunct() {
			return fmt.Sprintf("its child %s (%s) lives", q.Key(), q.Comm)
		}
	}
	if p.UID == 0 || p.SlurmJobID != "" || p.PodUID != "" || p.ContainerID != "" {
		return ""
	}
	for i := range c.to.Processes {
		q := &c.to.Processes[i]
		if q.UID == p.UID && !q.Defunct() && !q.KernelThread && q.SlurmJobID == "" && q.PodUID == "" && q.ContainerID == "" {
			return fmt.Sprintf("uid %d, which no job, pod or container owns, runs %s (%s)", p.UID, q.Key(), q.Comm)
		}
	}
	return ""
}
