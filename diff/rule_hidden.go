package diff

import (
	"fmt"

	"github.com/gpusnap/gpusnap/snapshot"
)

// KindHiddenProcess: a PID the kernel has whose /proc directory does not read as that process.
const KindHiddenProcess = "hidden_process"

var ruleHiddenProcess = &Rule{
	Kind: KindHiddenProcess, Title: "Hidden process",
	Severities: []Severity{High},
	compare:    []func(*comparison) []Finding{hiddenProcesses},
	// A hidden process may use any GPU: it fails the check of every set.
	check: func(c *comparison, _ *gpuSet) []Finding { return hiddenProcesses(c) },
}

// hiddenProcesses reports a PID the kernel still had at TO whose /proc
// directory did not read as that process, as under a mount over /proc/PID.
// High: what it holds was not seen, and only a process with something to hide
// does that. One hidden at FROM too (same PID and start time) is a note.
func hiddenProcesses(c *comparison) []Finding {
	var out []Finding
	for _, h := range c.to.Scan.Hidden {
		if before := hiddenAt(c.from, h); before != nil {
			c.notCompared(fmt.Sprintf("pid %d was hidden from /proc at both ends (%s): what it maps or holds was not compared", h.PID, h.Why))
			continue
		}
		ref := &ProcessRef{PID: h.PID, StartTime: h.StartTime, Comm: h.Comm}
		out = append(out, Finding{
			Kind:     KindHiddenProcess,
			Severity: High,
			Summary:  fmt.Sprintf("pid %d is hidden from /proc: %s; what it maps or holds is unknown", h.PID, h.Why),
			Process:  ref,
			Evidence: []string{h.Why},
		})
	}
	return out
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
