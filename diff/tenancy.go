package diff

import (
	"fmt"

	"github.com/gpusnap/gpusnap/snapshot"
)

// ownTenancy says how a process's own cgroup names tenant, as a Slurm job
// (cgroup v1 /slurm/uid_N/job_N/..., v2 /system.slice/slurmstepd.scope/job_N/...),
// a pod or a container, each only where the owner rule vouches for it. It
// is "" when the rule does not.
func ownTenancy(p *snapshot.Process, tenant string) string {
	return cgroupTenancy(p.VerifiedOwner(snapshot.OwnerSlurmJob), p.VerifiedOwner(snapshot.OwnerPod),
		p.VerifiedOwner(snapshot.OwnerContainer), tenant)
}

// cgroupTenancy says why a cgroup's Slurm job, pod or container names the
// tenant, or "". One rule serves snapshot processes and event-log processes.
func cgroupTenancy(slurmJob, podUID, containerID, tenant string) string {
	switch {
	case tenant == "":
		return ""
	case slurmJob == tenant:
		return "its cgroup is slurm job " + tenant + "'s"
	case podUID == tenant:
		return "its cgroup is pod " + tenant + "'s"
	case containerID == tenant:
		return "its cgroup is container " + snapshot.ShortContainerID(tenant) + "'s"
	}
	return ""
}

// tenantMembers finds tenant's processes in snaps, by PID@START, each with why
// it belongs, where its own or an ancestor's cgroup names the tenant. Ancestry
// finds a process that left the job's cgroup but descends from its step. It is
// read in every snapshot, because an orphan is reparented to init and only a
// snapshot taken while its parents lived links them.
func tenantMembers(tenant string, snaps ...*snapshot.Snapshot) map[string]string {
	why := make(map[string]string)
	if tenant == "" {
		return why
	}
	for _, s := range snaps {
		if s == nil {
			continue
		}
		byPID := make(map[int]*snapshot.Process, len(s.Processes))
		for i := range s.Processes {
			byPID[s.Processes[i].PID] = &s.Processes[i]
		}
		// root holds, per PID, the nearest ancestor (or the process itself)
		// whose cgroup names the tenant, or nil, so that each PPID chain is
		// walked once per snapshot.
		root := make(map[int]*snapshot.Process, len(s.Processes))
		var find func(p *snapshot.Process, depth int) *snapshot.Process
		find = func(p *snapshot.Process, depth int) *snapshot.Process {
			if r, done := root[p.PID]; done {
				return r
			}
			root[p.PID] = nil // a PPID cycle (a damaged tree) ends here
			var r *snapshot.Process
			if ownTenancy(p, tenant) != "" {
				r = p
			} else if parent := byPID[p.PPID]; parent != nil && parent != p && parent.StartTime <= p.StartTime && depth < len(s.Processes) {
				r = find(parent, depth+1)
			}
			root[p.PID] = r
			return r
		}
		for i := range s.Processes {
			p := &s.Processes[i]
			r := find(p, 0)
			if r == nil {
				continue
			}
			if _, seen := why[p.Key()]; seen {
				continue
			}
			reason := ownTenancy(r, tenant)
			if r != p {
				reason = fmt.Sprintf("descends from %s (%s): %s", r.Key(), r.Comm, reason)
			}
			why[p.Key()] = reason + inSnapshot(s)
		}
	}
	return why
}

func inSnapshot(s *snapshot.Snapshot) string {
	if s.ID == "" {
		return ""
	}
	return " (snapshot " + s.ID + ")"
}
