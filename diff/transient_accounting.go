package diff

import (
	"fmt"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"

	"github.com/gpusnap/gpusnap/snapshot"
)

// startSlack is how far apart two clocks may put one process's start. NVML
// accounting's start time is the CPU's clock in microseconds, and a snapshot's
// is btime (whole seconds) plus clock ticks.
const startSlack = 2 * time.Second

// accountingTransients is transient_gpu_process's second source, NVML's
// accounting records at TO (the driver keeps one per process that ran on
// the GPU while accounting was on, exited ones included), for processes that
// ran between FROM and TO and are gone at TO, even without gpusnap watch.
func (c *comparison) accountingTransients() []Finding {
	var out []Finding
	for gi := range c.to.NVML.Devices {
		g := &c.to.NVML.Devices[gi]
		for _, a := range g.Accounting {
			start := time.UnixMicro(int64(a.StartTime))
			end := start.Add(time.Duration(a.Time) * time.Millisecond)
			if end.Before(c.from.Host.CaptureStart) || start.After(c.windowEnd()) {
				continue // ran outside the window
			}
			if p := c.toByPID[a.PID]; p != nil && !p.Defunct() && sameStart(p, start) {
				continue // alive at TO, so the snapshot rules say what it holds
			}
			out = append(out, c.accountingFinding(g, a, start))
		}
	}
	return out
}

func (c *comparison) accountingFinding(g *snapshot.GPU, a snapshot.AccountingStats, start time.Time) Finding {
	ref := &ProcessRef{PID: a.PID, UID: -1}
	sev := Medium
	var signs []string
	if p := c.processStartedAt(a.PID, start); p != nil {
		ref, signs = processRef(p), masquerade(p)
	} else if e := c.eventProcessStartedAt(a.PID, start); e != nil {
		// In no snapshot, but watch saw it. It takes the event log's
		// identity, so that its events join this finding, not raise a second one.
		ref, signs = eventProcessRef(e), eventMasquerade(e)
	}
	if len(signs) > 0 {
		sev = High
	}
	figures := accountingFigures(a)
	f := Finding{
		Kind:     KindTransientGPUProcess,
		Severity: sev,
		Summary: fmt.Sprintf("%s ran on GPU %d %s between the snapshots (%s) and is gone at TO (NVML accounting)",
			describe(ref), g.Index, g.UUID, figures),
		Process: ref,
		GPUUUID: g.UUID,
		Time:    &start,
		Evidence: []string{fmt.Sprintf("nvml accounting on %s: pid %d, start_time %d (%s), time %d ms, max_memory_usage %s, gpu_utilization %s, memory_utilization %s, is_running %v",
			g.UUID, a.PID, a.StartTime, start.UTC().Format(time.RFC3339Nano), a.Time, optBytes(a.MaxMemoryUsage), optPercent(a.GPUUtilization), optPercent(a.MemoryUtilization), a.IsRunning)},
	}
	if ref.StartTime == 0 {
		f.Evidence = append(f.Evidence, fmt.Sprintf("no snapshot of the window has PID %d started then: the process started and ended between them", a.PID))
	}
	f.Evidence = append(f.Evidence, signs...)
	return f
}

// accountingFigures is a record's figures for a summary line.
func accountingFigures(a snapshot.AccountingStats) string {
	s := fmt.Sprintf("ran %s, max memory %s, GPU utilization %s, memory utilization %s",
		(time.Duration(a.Time) * time.Millisecond).String(), optBytes(a.MaxMemoryUsage), optPercent(a.GPUUtilization), optPercent(a.MemoryUtilization))
	if a.IsRunning {
		s += ", still running by NVML's record"
	}
	return s
}

// processStartedAt finds the process with pid that started at start (within
// startSlack) at FROM, at TO or in the tenant's snapshots between them.
func (c *comparison) processStartedAt(pid int, start time.Time) *snapshot.Process {
	for _, p := range []*snapshot.Process{c.toByPID[pid], c.fromByPID[pid]} {
		if p != nil && sameStart(p, start) {
			return p
		}
	}
	for _, h := range c.opts.History {
		for i := range h.Processes {
			if p := &h.Processes[i]; p.PID == pid && sameStart(p, start) {
				return p
			}
		}
	}
	return nil
}

// eventProcessStartedAt finds the process with pid that started at start
// (within startSlack) among those the event log of the window names.
func (c *comparison) eventProcessStartedAt(pid int, start time.Time) *eventlog.Process {
	if c.opts.Events == nil {
		return nil
	}
	var found *eventlog.Process
	c.eachEvent(func(e *eventlog.Event) {
		if p := e.Process; found == nil && p != nil && p.PID == pid && closeStarts(snapshot.StartedAt(c.to.Host.BootTime, p.StartTime), start) {
			found = p
		}
	})
	return found
}

// sameStart reports whether p started at t, as far as two clocks can say.
func sameStart(p *snapshot.Process, t time.Time) bool {
	return !p.Started.IsZero() && closeStarts(p.Started, t)
}

// closeStarts reports whether two clocks' starts of a process agree.
func closeStarts(a, b time.Time) bool {
	d := a.Sub(b)
	return d < startSlack && d > -startSlack
}

func optBytes(n *uint64) string {
	if n == nil {
		return "not available"
	}
	return bytesText(*n)
}

func optPercent(n *uint32) string {
	if n == nil {
		return "not available"
	}
	return fmt.Sprintf("%d%%", *n)
}
