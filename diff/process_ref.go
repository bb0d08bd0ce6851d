package diff

import (
	"fmt"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// processRef names a process for a finding, who it is, who runs it and which
// container, pod or Slurm job it belongs to.
func processRef(p *snapshot.Process) *ProcessRef {
	return &ProcessRef{
		PID:         p.PID,
		StartTime:   p.StartTime,
		PPID:        p.PPID,
		State:       p.State,
		Started:     p.Started,
		SystemdUnit: p.SystemdUnit,
		UnitRestart: p.UnitRestart,
		UnitTimer:   p.UnitTimer,
		Wchan:       p.Wchan,
		Ancestry:    p.Ancestry,
		Reparented:  p.Reparented,
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
		Sockets:     p.Sockets,
		ExeSHA256:   p.ExeSHA256,
		HashStatus:  p.HashStatus,
		Package:     p.Package,
	}
}

// cgroupPath picks the cgroup that says the most about where a process runs,
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

// Describe names the process as every summary line about it begins. A
// report that heads a block with it may cut it from those lines.
func (p *ProcessRef) Describe() string { return describe(p) }

// describe names a process in a summary line, as "pid 4242 (python3, /usr/bin/python3.11, user bob)".
func describe(p *ProcessRef) string {
	parts := []string{p.Comm}
	if p.Exe != "" {
		parts = append(parts, snapshot.ExeText(p.Exe, p.ExeDeleted))
	}
	if p.User != "" {
		parts = append(parts, "user "+p.User)
	} else {
		parts = append(parts, snapshot.UserText("", p.UID))
	}
	parts = append(parts, snapshot.AttributionText(p.ContainerID, p.PodUID, p.SlurmJobID)...)
	return fmt.Sprintf("pid %d (%s)", p.PID, strings.Join(parts, ", "))
}
