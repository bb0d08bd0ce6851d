package snapshot

import (
	"slices"
	"strings"
)

// Owner kinds are the ids a cgroup path can carry, as the allow list names them.
const (
	OwnerSlurmJob  = "slurm_job"
	OwnerPod       = "pod"
	OwnerContainer = "container"
)

// OwnerCgroup is what the capture read of the cgroup directory whose name
// carries one owner id, and of every directory above it, to tell whether
// anyone but root could have made or entered it. Whoever can write a cgroup
// directory can name a child after any job, pod or container, and whoever
// can write its cgroup.procs can move a process in.
type OwnerCgroup struct {
	Owner string `json:"owner"` // OwnerSlurmJob, OwnerPod or OwnerContainer
	// Dir is the cgroup path down to the element that carries the id, in
	// the hierarchy it was read from (cgroup v2, or the v1 controllers of
	// Hierarchy).
	Dir       string `json:"dir"`
	Hierarchy string `json:"hierarchy,omitempty"`
	// Delegated names the first directory from the root down to Dir that a
	// non-root uid owns, or whose cgroup.procs a non-root uid or group can
	// write, and who (`/user.slice/.../x: owned by uid 1001`).
	Delegated string `json:"delegated,omitempty"`
	// Unread says why the directories could not all be read.
	Unread string `json:"unread,omitempty"`
}

// VerifiedOwner returns the id of kind (OwnerSlurmJob, OwnerPod,
// OwnerContainer) that p's cgroup carries, where the owner rule vouches for
// it, else "". The diff's triage, its tenancy, the allow list and watch's
// records all ask this one rule.
func (p *Process) VerifiedOwner(kind string) string {
	id := p.ownerID(kind)
	if id == "" || OwnerDoubt(kind, p.OwnerCgroups, p.cgroupPaths()) != "" {
		return ""
	}
	return id
}

// OwnerDoubts says, for each id p's cgroup carries that the owner rule does
// not vouch for, why. The reasons are the triage's evidence.
func (p *Process) OwnerDoubts() []string {
	var doubts []string
	for _, kind := range []string{OwnerSlurmJob, OwnerPod, OwnerContainer} {
		if p.ownerID(kind) == "" {
			continue
		}
		if why := OwnerDoubt(kind, p.OwnerCgroups, p.cgroupPaths()); why != "" {
			doubts = append(doubts, why)
		}
	}
	return doubts
}

func (p *Process) ownerID(kind string) string {
	switch kind {
	case OwnerSlurmJob:
		return p.SlurmJobID
	case OwnerPod:
		return p.PodUID
	case OwnerContainer:
		return p.ContainerID
	}
	return ""
}

// cgroupPaths are the paths of p's cgroup lines.
func (p *Process) cgroupPaths() []string {
	paths := make([]string, 0, len(p.Cgroups))
	for _, line := range p.Cgroups {
		_, rest, _ := strings.Cut(line, ":")
		_, path, _ := strings.Cut(rest, ":")
		paths = append(paths, path)
	}
	return paths
}

// OwnerDoubt is the owner rule. It says why an id of kind may be the
// tenant's own word, or "" where no directory at or above the one that
// carries it could be written by anyone but root (facts). Without facts
// (an older snapshot, a --proc-root tree), an id below a user manager
// (user@UID.service) is doubted by name.
func OwnerDoubt(kind string, facts []OwnerCgroup, paths []string) string {
	if facts == nil {
		for _, path := range paths {
			if selfNamed(path) {
				return "its " + kind + " id is read below a systemd user manager, a subtree its user names"
			}
		}
		return ""
	}
	for _, f := range facts {
		if f.Owner != kind {
			continue
		}
		switch {
		case f.Delegated != "":
			return "its " + kind + " id is read from " + f.Dir + ", yet " + f.Delegated + ": anyone that uid runs can name it"
		case f.Unread != "":
			return "its " + kind + " id is read from " + f.Dir + ", whose ownership could not be read: " + f.Unread
		}
		return ""
	}
	return "its " + kind + " id's cgroup directory was not read"
}

// UnderUserManager reports whether p runs below a systemd user manager,
// where a unit is its user's, not the system's.
func (p *Process) UnderUserManager() bool {
	return slices.ContainsFunc(p.cgroupPaths(), selfNamed)
}

// selfNamed reports whether a cgroup path lies below a systemd user manager
// (user@UID.service), a subtree delegated to its user.
func selfNamed(path string) bool {
	for e := range strings.SplitSeq(path, "/") {
		if strings.HasPrefix(e, "user@") && strings.HasSuffix(e, ".service") {
			return true
		}
	}
	return false
}
