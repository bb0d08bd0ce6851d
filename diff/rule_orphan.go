package diff

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/gpusnap/gpusnap/snapshot"
)

// KindOrphanGPUProcess means NVML, or AMD's KFD, lists a PID at TO that no live
// process has.
const KindOrphanGPUProcess = "orphan_gpu_process"

var _ = register(&Rule{
	Kind: KindOrphanGPUProcess, Title: "Orphan GPU process",
	Severities:     []Severity{High},
	WithoutProcess: true,
	compare:        []func(*comparison) []Finding{orphanGPUProcesses, orphanKFDProcesses},
	Order:          80,
})

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
				out = append(out, c.orphan(e, defunctWhy(live)))
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

// defunctWhy says why a zombie keeps no context.
func defunctWhy(p *snapshot.Process) string {
	return fmt.Sprintf("PID %d is %s (%s), defunct (state %s): it has exited and its parent, PID %d, has not reaped it",
		p.PID, p.Key(), p.Comm, p.State, p.PPID)
}

func (c *comparison) orphan(e nvmlEntry, why string) Finding {
	ref, evidence := c.orphanRef(e.proc.PID, entryEvidence(e), why)
	evidence = append(evidence, c.keepers(e.pool)...)
	if slices.Contains(c.to.Scan.VanishedPIDs, e.proc.PID) {
		evidence = append(evidence, fmt.Sprintf("PID %d vanished during the /proc scan at TO: it may have exited just then", e.proc.PID))
	}
	return Finding{
		Kind:     KindOrphanGPUProcess,
		Severity: High,
		Summary:  fmt.Sprintf("NVML lists pid %d on %s, which no live process accounts for", e.proc.PID, e.pool.label),
		Process:  ref,
		GPUUUID:  e.pool.uuid,
		Evidence: evidence,
	}
}

// orphanRef is the process an orphan's context most likely belongs to, and
// the evidence that says so after the lines given.
func (c *comparison) orphanRef(pid int, evidence ...string) (*ProcessRef, []string) {
	// There is no process to read the rest from, so uid -1 says unknown, not root.
	ref := &ProcessRef{PID: pid, UID: -1}
	now, old := c.toByPID[pid], c.fromByPID[pid]
	if old != nil {
		// NVML's context most likely belongs to the process that had the PID at FROM.
		ref = processRef(old)
		evidence = append(evidence, fmt.Sprintf("at FROM PID %d was %s (%s, exe %s)", pid, old.Key(), old.Comm, old.Exe))
	}
	if now != nil && now.Defunct() && (old == nil || old.Key() != now.Key()) {
		// Unless a zombie new since FROM has it now, as what is left of the
		// process whose context it was (FROM's record of the same process
		// names its exe, which a zombie's /proc entry no longer does).
		ref = processRef(now)
	}
	return ref, evidence
}

// orphanAtFrom reports whether NVML listed pid on the pool at FROM with no
// live process then, a stale entry older than the tenant.
func (c *comparison) orphanAtFrom(poolID string, pid int) bool {
	if _, listed := c.fromNVML.memoryOf(poolID, pid); !listed {
		return false
	}
	then := c.fromByPID[pid]
	return (then == nil || then.Defunct()) && !slices.Contains(c.from.Scan.RefusedPIDs, pid)
}

// orphanKFDProcesses reports a process that AMD's KFD still serves at TO
// (class/kfd/kfd/proc/PID, which keeps its device memory) that no live
// process has, or a zombie has. Its compute context outlived it. Once per
// GPU it holds memory on, or once for /dev/kfd where it lists none. One
// KFD listed at FROM with no live process then predates the tenant.
func orphanKFDProcesses(c *comparison) []Finding {
	if c.toAccel == nil {
		return nil
	}
	var out []Finding
	for i := range c.toAccel.a.KFDProcesses {
		kp := &c.toAccel.a.KFDProcesses[i]
		live := c.toByPID[kp.PID]
		var why string
		switch {
		case live == nil && c.toUnread[kp.PID], c.kfdOrphanAtFrom(kp.PID):
			continue
		case live == nil:
			why = "no live process has this PID at TO"
		case live.Defunct():
			why = defunctWhy(live)
		default:
			continue
		}
		out = append(out, c.kfdOrphans(kp, why)...)
	}
	return out
}

// kfdOrphans are the findings of one orphan KFD process, one a GPU it
// holds memory on, named as its device where KFD's topology joined it.
func (c *comparison) kfdOrphans(kp *snapshot.KFDProcess, why string) []Finding {
	if len(kp.VRAM) == 0 {
		return []Finding{c.kfdOrphan(kp.PID, "/dev/kfd", "/dev/kfd", "kfd: proc/"+strconv.Itoa(kp.PID)+" lists no vram file", why)}
	}
	out := make([]Finding, 0, len(kp.VRAM))
	for _, m := range kp.VRAM {
		on, device := fmt.Sprintf("KFD gpu_id %d", m.GPUID), ""
		if d := c.toAccel.kfdGPU(m.GPUID); d != nil {
			on, device = d.Vendor+" "+d.Name, d.Name
		}
		out = append(out, c.kfdOrphan(kp.PID, on, device,
			fmt.Sprintf("kfd: proc/%d/vram_%d: %s", kp.PID, m.GPUID, bytesText(m.Bytes)), why))
	}
	return out
}

func (c *comparison) kfdOrphan(pid int, on, device, line, why string) Finding {
	ref, evidence := c.orphanRef(pid, line, why)
	return Finding{
		Kind:     KindOrphanGPUProcess,
		Severity: High,
		Summary:  fmt.Sprintf("KFD serves pid %d on %s, which no live process accounts for", pid, on),
		Process:  ref,
		Device:   device,
		Evidence: evidence,
	}
}

// kfdOrphanAtFrom reports whether KFD served pid at FROM with no live
// process then, a stale entry older than the tenant.
func (c *comparison) kfdOrphanAtFrom(pid int) bool {
	if c.fromAccel == nil || c.fromAccel.kfdPID[pid] == nil {
		return false
	}
	then := c.fromByPID[pid]
	return (then == nil || then.Defunct()) && !slices.Contains(c.from.Scan.RefusedPIDs, pid)
}
