package diff

import (
	"fmt"

	"github.com/gpusnap/gpusnap/eventlog"

	"github.com/gpusnap/gpusnap/snapshot"
)

// KindHiddenProcess is a PID the kernel has whose /proc directory does not read as that process.
const KindHiddenProcess = "hidden_process"

var _ = register(&Rule{
	Kind: KindHiddenProcess, Title: "Hidden process",
	Severities: []Severity{High},
	compare:    []func(*comparison) []Finding{hiddenProcesses},
	// A hidden process may use any GPU, so it fails the check of every set.
	check: func(c *comparison, _ *gpuSet) []Finding { return hiddenProcesses(c) },
	Order: 70,
})

// hiddenProcesses reports a PID the kernel still had at TO whose /proc
// directory did not read as that process, as under a mount over /proc/PID.
// High, since only a process with something to hide does that. One hidden
// at FROM too is a note. The event log or FROM names the PID where it can.
func hiddenProcesses(c *comparison) []Finding {
	var hidden []snapshot.HiddenProcess
	for _, h := range c.to.Scan.Hidden {
		if before := hiddenAt(c.from, h); before != nil {
			c.notCompared(fmt.Sprintf("pid %d was hidden from /proc at both ends (%s): what it maps or holds was not compared", h.PID, h.Why))
			continue
		}
		hidden = append(hidden, h)
	}
	if len(hidden) == 0 {
		return nil
	}
	logged := c.hiddenInLog(hidden)
	var out []Finding
	for _, h := range hidden {
		ref := &ProcessRef{PID: h.PID, StartTime: h.StartTime, Comm: h.Comm}
		var name *ProcessRef
		named, evidence := "", []string{h.Why}
		if e := logged[h.PID]; e != nil {
			name = eventProcessRef(e.Process)
			named = "; the event log names it"
			evidence = append(evidence, "event: "+eventEvidence(e))
		} else if p := c.fromByPID[h.PID]; p != nil && (h.StartTime == 0 || p.StartTime == h.StartTime) {
			name = processRef(p)
			named = fmt.Sprintf("; FROM names the PID (%d@%d)", p.PID, p.StartTime)
			if h.StartTime == 0 {
				named += ", the same process unless the PID was reused"
				evidence = append(evidence, "FROM: "+describe(name))
			}
		}
		// Only a known start time makes the name the process's. Without
		// one the PID may hold anything, so the finding keeps the bare PID
		// and no allow entry or triage reads the named process's fields.
		if name != nil && h.StartTime != 0 {
			ref = name
		}
		who := fmt.Sprintf("pid %d", h.PID)
		if name != nil {
			who = describe(name)
		}
		out = append(out, Finding{
			Kind:     KindHiddenProcess,
			Severity: High,
			Summary:  fmt.Sprintf("%s is hidden from /proc: %s%s; what it maps or holds is unknown", who, h.Why, named),
			Process:  ref,
			Evidence: evidence,
		})
	}
	return out
}

// hiddenInLog is, for each hidden PID, the last event of the window that
// names that process (the same start time, where the capture knew it),
// one that uses a device before any other. That is what the log still holds
// of a process /proc no longer shows.
func (c *comparison) hiddenInLog(hidden []snapshot.HiddenProcess) map[int]*eventlog.Event {
	start := map[int]uint64{}
	for _, h := range hidden {
		start[h.PID] = h.StartTime
	}
	found := map[int]*eventlog.Event{}
	c.eachEvent(func(e *eventlog.Event) {
		p := e.Process
		if p == nil || e.Time.Before(c.since) || !e.Time.Before(c.windowEnd()) {
			return
		}
		st, ok := start[p.PID]
		if !ok || (st != 0 && p.StartTime != st) {
			return
		}
		if old := found[p.PID]; old == nil || e.UsesDevice() || !old.UsesDevice() {
			found[p.PID] = e
		}
	})
	return found
}

// hiddenAt is the record of s's hidden PIDs that names the same process as
// h, or nil.
func hiddenAt(s *snapshot.Snapshot, h snapshot.HiddenProcess) *snapshot.HiddenProcess {
	for i := range s.Scan.Hidden {
		b := &s.Scan.Hidden[i]
		if b.PID == h.PID && (b.StartTime == 0 || h.StartTime == 0 || b.StartTime == h.StartTime) {
			return b
		}
	}
	return nil
}
