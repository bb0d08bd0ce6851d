package diff

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// unreadableProcesses: at TO a process whose maps or fds could not be read
// (refused to a user who is not root, or to root by a non-dumpable
// process), that was not there at FROM or was read there in full. What it
// maps or holds is unknown, and unknown is not clean. A process unreadable
// at both ends raises nothing: its use could not have been compared either way.
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

// unsettledCapture: a capture that stopped at its bound while processes
// kept vanishing before they were read (a process that forks and exits
// faster than it is read) may not have seen one that maps or holds a GPU.
// A tenant can cause it, so it is a finding, medium, not a note; check
// raises it too, whatever GPUs it is asked about.
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
