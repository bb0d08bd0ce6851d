package diff

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// processRef names a process for a finding: who it is, who runs it and which
// container, pod or Slurm job it belongs to.
func processRef(p *snapshot.Process) *ProcessRef {
	return &ProcessRef{
		PID:         p.PID,
		StartTime:   p.StartTime,
		Comm:        p.Comm,
		Exe:         p.Exe,
		ExeDeleted:  p.ExeDeleted,
		Cmdline:     p.Cmdline,
		UID:         p.UID,
		User:        p.User,
		Cgroup:      cgroupPath(p.Cgroups),
		ContainerID: p.ContainerID,
		PodUID:      p.PodUID,
		SlurmJobID:  p.SlurmJobID,
	}
}

// cgroupPath picks the cgroup that says the most about where a process runs:
// the v2 path, else the first v1 path below the root.
func cgroupPath(lines []string) string {
	var first string
	for _, line := range lines {
		// hierarchy-ID:controllers:path; the path may itself hold colons.
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		hier, path := parts[0], parts[2]
		if hier == "0" && parts[1] == "" && path != "/" {
			return path
		}
		if first == "" && path != "/" {
			first = path
		}
	}
	return first
}

// describe names a process in a summary line: "pid 4242 (python3, /usr/bin/python3.11, user bob)".
func describe(p *ProcessRef) string {
	parts := []string{p.Comm}
	if p.Exe != "" {
		exe := p.Exe
		if p.ExeDeleted {
			exe += " (deleted)"
		}
		parts = append(parts, exe)
	}
	switch {
	case p.User != "":
		parts = append(parts, "user "+p.User)
	default:
		parts = append(parts, fmt.Sprintf("uid %d", p.UID))
	}
	if p.ContainerID != "" {
		parts = append(parts, "container "+shortID(p.ContainerID))
	}
	if p.PodUID != "" {
		parts = append(parts, "pod "+p.PodUID)
	}
	if p.SlurmJobID != "" {
		parts = append(parts, "slurm job "+p.SlurmJobID)
	}
	return fmt.Sprintf("pid %d (%s)", p.PID, strings.Join(parts, ", "))
}

// shortID shortens a 64-hex container id as docker ps does.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// inheritKinds are the findings about a device a process uses, which a
// surviving process may have inherited from a tenant process (a fork keeps
// its parent's mappings and descriptors).
var inheritKinds = map[string]bool{
	KindLeftoverDeviceMapping: true,
	KindLeftoverDeviceHolder:  true,
	KindRenamedDeviceNode:     true,
}

// WantsHistory reports whether a finding would name more with
// Options.History: a device a surviving process may have inherited from a
// tenant process, or a PID the kernel log blames that no snapshot at either
// end has. Only then is the history read, so callers may load it only when
// this says so.
func (r *Result) WantsHistory() bool {
	for _, f := range r.Findings {
		switch {
		case f.Process == nil:
		case inheritKinds[f.Kind]:
			return true
		case f.Kind == KindXidError && f.Process.StartTime == 0:
			return true
		}
	}
	return false
}

// ancestor is a tenant process, seen in an earlier snapshot, that had a mapping.
type ancestor struct {
	snap *snapshot.Snapshot
	proc *snapshot.Process
	m    snapshot.Mapping
}

// mappingSig is what makes two mappings the same: the device, offset and size.
type mappingSig struct {
	path   string
	offset uint64
	size   uint64
}

// history indexes the tenant processes' mappings in earlier snapshots.
type history struct {
	bySig map[mappingSig][]ancestor
	ppid  map[*snapshot.Snapshot]map[string]int // PPID of each process, by PID@START
}

// attachInheritance marks findings of a surviving process whose mapping
// matches one a tenant process had in an earlier stored snapshot: "inherited
// from PID@START (exe)".
func (c *comparison) attachInheritance(findings []Finding) {
	if len(c.opts.History) == 0 {
		return
	}
	var h *history
	for i := range findings {
		f := &findings[i]
		if !inheritKinds[f.Kind] || f.Process == nil {
			continue
		}
		p := c.toByKey[f.Process.Key()]
		if p == nil {
			continue
		}
		if h == nil {
			h = c.indexHistory()
		}
		for _, m := range p.Mappings {
			if m.Path != f.Device {
				continue
			}
			if a, ok := h.bestAncestor(p, m); ok {
				f.InheritedFrom = fmt.Sprintf("%s (%s)", a.proc.Key(), a.proc.Exe)
				f.Evidence = append(f.Evidence, fmt.Sprintf("inherited: in snapshot %s tenant process %s (%s) mapped %s",
					a.snap.ID, a.proc.Key(), a.proc.Comm, a.m.Line()))
				break
			}
		}
	}
}

// indexHistory indexes the device mappings of tenant processes in the
// history: processes absent from FROM, which ran after the baseline.
func (c *comparison) indexHistory() *history {
	h := &history{bySig: make(map[mappingSig][]ancestor), ppid: make(map[*snapshot.Snapshot]map[string]int)}
	for _, s := range c.opts.History {
		ppid := make(map[string]int, len(s.Processes))
		h.ppid[s] = ppid
		for i := range s.Processes {
			p := &s.Processes[i]
			key := p.Key()
			ppid[key] = p.PPID
			if len(p.Mappings) == 0 || c.fromByKey[key] != nil {
				continue
			}
			for _, m := range p.Mappings {
				sig := mappingSig{m.Path, m.Offset, m.Size}
				h.bySig[sig] = append(h.bySig[sig], ancestor{snap: s, proc: p, m: m})
			}
		}
	}
	return h
}

// bestAncestor picks, among the tenant processes that had the mapping, the
// one the survivor most likely got it from: its parent at the time, else the
// oldest.
func (h *history) bestAncestor(survivor *snapshot.Process, m snapshot.Mapping) (ancestor, bool) {
	var best ancestor
	found, bestIsParent := false, false
	key := survivor.Key()
	for _, a := range h.bySig[mappingSig{m.Path, m.Offset, m.Size}] {
		if a.proc.Key() == key {
			continue
		}
		if m.DeviceNumber != "" && a.m.DeviceNumber != "" && m.DeviceNumber != a.m.DeviceNumber {
			continue
		}
		ppid, seen := h.ppid[a.snap][key]
		isParent := seen && ppid == a.proc.PID
		better := !found ||
			(isParent && !bestIsParent) ||
			(isParent == bestIsParent && cmp.Or(
				cmp.Compare(a.proc.StartTime, best.proc.StartTime),
				cmp.Compare(a.proc.PID, best.proc.PID)) < 0)
		if better {
			best, found, bestIsParent = a, true, isParent
		}
	}
	return best, found
}
