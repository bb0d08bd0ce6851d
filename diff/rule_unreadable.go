package diff

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// KindUnreadableProcess means what a live process maps or holds at TO could not be read.
const KindUnreadableProcess = "unreadable_process"

var _ = register(&Rule{
	Kind: KindUnreadableProcess, Title: "Unreadable process",
	Severities: []Severity{Medium},
	compare:    []func(*comparison) []Finding{unreadableProcesses, unsettledCapture},
	check:      func(c *comparison, _ *gpuSet) []Finding { return unsettledCapture(c) },
	Order:      60,
})

// unreadableProcesses reports a process at TO whose maps or fds could not be
// read and that was new or read in full at FROM. What it maps or holds is
// unknown, and unknown is not clean. One unreadable at both ends raises
// nothing, since its use could not have been compared either way.
func unreadableProcesses(c *comparison) []Finding {
	var out []Finding
	for i := range c.to.Processes {
		p := &c.to.Processes[i]
		if len(p.Unreadable) == 0 || p.Defunct() {
			continue
		}
		before := c.fromByKey[idOf(p.PID, p.StartTime)]
		since := "a process new since FROM"
		if before != nil {
			if unreadableIn(before, c.from) {
				continue
			}
			since = "read in full at FROM"
		}
		var evidence []string
		for _, e := range p.Errors {
			for _, what := range p.Unreadable {
				if strings.HasPrefix(e, what+": ") {
					evidence = append(evidence, e)
				}
			}
		}
		ref := processRef(p)
		out = append(out, Finding{
			Kind:     KindUnreadableProcess,
			Severity: Medium,
			Summary: fmt.Sprintf("%s: its %s could not be read, so what it maps or holds is unknown; %s",
				describe(ref), strings.Join(p.Unreadable, " and "), since),
			Process:  ref,
			Evidence: evidence,
		})
	}
	return out
}

// unsettledCapture reports a capture that stopped at its bound while processes
// kept vanishing before they were read. It is medium, as it may have missed one
// that maps or holds a GPU, and a tenant can cause it, so it is a finding and
// not a note. Check raises it whatever GPUs it is asked about.
func unsettledCapture(c *comparison) []Finding {
	u := c.to.Scan.Unsettled
	if u == "" {
		return nil
	}
	c.partial = true
	return []Finding{{
		Kind:     KindUnreadableProcess,
		Severity: Medium,
		Summary:  "the capture at TO did not settle, so a process that keeps changing its PID may not have been read: " + u,
		Evidence: []string{fmt.Sprintf("%d listings of /proc at TO", c.to.Scan.Relists+1)},
	}}
}

// unreadableIn reports whether p's maps or fds could not be read in s.
// Snapshots stored before gpusnap recorded that name the processes that
// refused any read instead.
func unreadableIn(p *snapshot.Process, s *snapshot.Snapshot) bool {
	return len(p.Unreadable) > 0 || slices.Contains(s.Scan.RefusedPIDs, p.PID)
}
