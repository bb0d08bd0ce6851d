package diff

import (
	"fmt"
	"slices"
)

// orphanGPUProcesses: NVML lists a PID at TO that no live process has (none,
// or a defunct one: a zombie has exited and keeps no context), or whose /proc
// entry is another process than the one NVML listed at FROM (the PID was
// reused): a GPU context that outlived its process. An orphan NVML already
// listed at FROM, with no live process then either, predates the tenant.
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
			case live.Defunct():
				out = append(out, c.orphan(e, fmt.Sprintf("PID %d is %s (%s), defunct (state %s): it has exited and its parent, PID %d, has not reaped it",
					pid, live.Key(), live.Comm, live.State, live.PPID)))
			default:
				if why := c.staleEntry(pid); why != "" {
					out = append(out, c.orphan(e, fmt.Sprintf("PID %d is now another process, %s (%s): %s",
						pid, live.Key(), live.Comm, why)))
				}
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
	now, old := c.toByPID[pid], c.fromByPID[pid]
	if old != nil {
		// NVML's context most likely belongs to the process that had the PID at FROM.
		ref = processRef(old)
		evidence = append(evidence, fmt.Sprintf("at FROM PID %d was %s (%s, exe %s)", pid, old.Key(), old.Comm, old.Exe))
	}
	if now != nil && now.Defunct() && (old == nil || old.Key() != now.Key()) {
		// Unless a zombie new since FROM has it now: what is left of the
		// process whose context it was (FROM's record of the same process
		// names its exe, which a zombie's /proc entry no longer does).
		ref = processRef(now)
	}
	evidence = append(evidence, c.keepers(e.pool)...)
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

// staleEntry says why NVML's entry for pid at TO belongs to an earlier
// process than the one that has the PID at TO, or "" when it may be its own:
//   - NVML listed pid at FROM for another process, or for none;
//   - the PID was another process at FROM, and the one now at it neither maps
//     nor holds an NVIDIA device though its reads were not refused: a process
//     with a GPU context keeps /dev/nvidia* open, so the context is the one a
//     process had between the two snapshots, before the PID was reused.
func (c *comparison) staleEntry(pid int) string {
	now := c.toByPID[pid]
	if now == nil || now.Defunct() {
		return "" // no live process: an orphan, not a stale entry
	}
	then := c.fromByPID[pid]
	if len(c.fromNVML.byPID[pid]) > 0 {
		switch {
		case (then == nil || then.Defunct()) && !slices.Contains(c.from.Scan.RefusedPIDs, pid):
			// Listed by NVML at FROM with no live process then: an orphan at FROM.
			return "NVML listed this PID at FROM with no live process, and lists it still: the PID was reused"
		case then != nil && then.Key() != now.Key():
			return fmt.Sprintf("NVML listed this PID at FROM for %s (%s): the PID was reused", then.Key(), then.Comm)
		}
		return ""
	}
	if then != nil && then.Key() != now.Key() && !now.UsesNVIDIA() && !c.toUnread[pid] {
		return fmt.Sprintf("at FROM the PID was %s (%s), and %s maps and holds no NVIDIA device: the PID was reused after a process on the GPU exited",
			then.Key(), then.Comm, now.Key())
	}
	return ""
}

// orphanAtFrom reports whether NVML listed pid on the pool at FROM with no
// live process then: a stale entry older than the tenant.
func (c *comparison) orphanAtFrom(poolID string, pid int) bool {
	if _, listed := c.fromNVML.memoryOf(poolID, pid); !listed {
		return false
	}
	then := c.fromByPID[pid]
	return (then == nil || then.Defunct()) && !slices.Contains(c.from.Scan.RefusedPIDs, pid)
}

// live reports whether a PID has a process at TO that is not defunct, read
// or refused.
func (c *comparison) live(pid int) bool {
	if p := c.toByPID[pid]; p != nil {
		return !p.Defunct()
	}
	return c.toUnread[pid]
}

// keepers names the processes that may keep a dead process's GPU context, and
// its memory, alive: a context lives while any descriptor on the GPU's
// /dev/nvidiaN that it was made through is open, and a forked child keeps its
// parent's. They hold or map the pool's GPU, did not at FROM, and NVML does
// not list them on the pool.
func (c *comparison) keepers(pl *pool) []string {
	if pl.minor == nil {
		return nil
	}
	var out []string
	since := " and which did not use it at FROM"
	if c.check {
		since = ""
	}
	for _, ch := range c.changed {
		if _, listed := c.toNVML.memoryOf(pl.id, ch.proc.PID); listed && c.staleEntry(ch.proc.PID) == "" {
			continue
		}
		for _, u := range ch.uses {
			if !u.nvidia() || u.gpuMinor == nil || *u.gpuMinor != *pl.minor || ch.prior[u.device] != nil {
				continue
			}
			out = append(out, fmt.Sprintf("%s is held or mapped by %s (%s, exe %s), which NVML does not list there%s: it may keep the context alive",
				u.device, ch.proc.Key(), ch.proc.Comm, withDeleted(ch.proc.Exe, ch.proc.ExeDeleted), since))
			break
		}
	}
	return out
}
