package diff

import (
	"fmt"
	"slices"
)

// orphanGPUProcesses: NVML lists a PID at TO that no live process has, or
// whose /proc entry is another process than the one NVML listed at FROM (the
// PID was reused): a GPU context that outlived its process. An orphan NVML
// already listed at FROM, with no live process then either, predates the tenant.
func orphanGPUProcesses(c *comparison) []Finding {
	var out []Finding
	for _, pl := range c.toNVML.pools {
		for _, e := range pl.procs {
			pid := e.proc.PID
			live := c.toByPID[pid]
			switch {
			case live == nil && c.toUnread[pid]:
				continue // alive, only unreadable
			case c.orphanAtFrom(pl.id, pid):
				continue
			case live == nil:
				out = append(out, c.orphan(e, "no live process has this PID at TO"))
			case c.pidReused(pid):
				out = append(out, c.orphan(e, fmt.Sprintf("PID %d is now another process, %s (%s): the PID was reused",
					pid, live.Key(), live.Comm)))
			}
		}
	}
	return out
}

func (c *comparison) orphan(e nvmlEntry, why string) Finding {
	pid := e.proc.PID
	evidence := []string{entryEvidence(e), why}
	// No process to read the rest from: uid -1 says unknown, not root.
	ref := &ProcessRef{PID: pid, UID: -1}
	if old := c.fromByPID[pid]; old != nil {
		// NVML's context most likely belongs to the process that had the PID at FROM.
		ref = processRef(old)
		evidence = append(evidence, fmt.Sprintf("at FROM PID %d was %s (%s, exe %s)", pid, old.Key(), old.Comm, old.Exe))
	}
	if slices.Contains(c.to.Scan.VanishedPIDs, pid) {
		evidence = append(evidence, fmt.Sprintf("PID %d vanished during the /proc scan at TO: it may have exited just then", pid))
	}
	return Finding{
		Kind:     KindOrphanGPUProcess,
		Severity: High,
		Summary:  fmt.Sprintf("NVML lists pid %d on %s, which no live process accounts for", pid, e.pool.label),
		Process:  ref,
		GPUUUID:  e.pool.uuid,
		Evidence: evidence,
	}
}

// pidReused reports whether NVML listed pid at FROM for a process other than
// the one that has the PID at TO, so NVML's entry at TO is stale.
func (c *comparison) pidReused(pid int) bool {
	now := c.toByPID[pid]
	if now == nil || len(c.fromNVML.byPID[pid]) == 0 {
		return false
	}
	then := c.fromByPID[pid]
	if then == nil {
		// Listed by NVML at FROM with no live process then: an orphan at
		// FROM, unless FROM could only not read the process.
		return !slices.Contains(c.from.Scan.RefusedPIDs, pid)
	}
	return then.Key() != now.Key()
}

// orphanAtFrom reports whether NVML listed pid on the pool at FROM with no
// live process then: a stale entry older than the tenant.
func (c *comparison) orphanAtFrom(poolID string, pid int) bool {
	if _, listed := c.fromNVML.memoryOf(poolID, pid); !listed {
		return false
	}
	return c.fromByPID[pid] == nil && !slices.Contains(c.from.Scan.RefusedPIDs, pid)
}

// live reports whether a PID has a process at TO, read or refused.
func (c *comparison) live(pid int) bool { return c.toByPID[pid] != nil || c.toUnread[pid] }
