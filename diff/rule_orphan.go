package diff

import (
	"fmt"
	"slices"
)

// KindOrphanGPUProcess: NVML lists a PID at TO that no live process has.
const KindOrphanGPUProcess = "orphan_gpu_process"

var ruleOrphanGPUProcess = &Rule{
	Kind: KindOrphanGPUProcess, Title: "Orphan GPU process",
	Severities:     []Severity{High},
	WithoutProcess: true,
	compare:        []func(*comparison) []Finding{orphanGPUProcesses},
}

// orphanGPUProcesses reports a GPU context that outlived its process. NVML
// lists a PID at TO that no live process has (a zombie keeps no context), or
// whose process is another than NVML listed at FROM. An orphan NVML already
// listed at FROM, with no live process then either, predates the tenant and
// raises nothing.
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

// orphanAtFrom reports whether NVML listed pid on the pool at FROM with no
// live process then: a stale entry older than the tenant.
func (c *comparison) orphanAtFrom(poolID string, pid int) bool {
	if _, listed := c.fromNVML.memoryOf(poolID, pid); !listed {
		return false
	}
	then := c.fromByPID[pid]
	return (then == nil || then.Defunct()) && !slices.Contains(c.from.Scan.RefusedPIDs, pid)
}
