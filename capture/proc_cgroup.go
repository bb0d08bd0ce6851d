package capture

import (
	"slices"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// /proc/PID/cgroup is one line per hierarchy, "ID:controllers:path" (cgroup
// v2: "0::/path"). The paths name who runs the process:
//
//	docker (systemd)       /system.slice/docker-<64 hex>.scope
//	docker (cgroupfs)      /docker/<64 hex>
//	containerd (k8s)       /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<64 hex>.scope
//	cri-o (k8s)            .../crio-<64 hex>.scope
//	kubelet (cgroupfs)     /kubepods/burstable/pod<uid>/<64 hex>, or .../pod<uid>/crio-<64 hex> (cri-o)
//	kubelet --cgroup-root  /kubelet.slice/kubelet-kubepods.slice/.../kubelet-kubepods-pod<uid>.slice/..., /kubelet/kubepods/pod<uid>/...
//	Slurm (v1)             /slurm/uid_1000/job_4242/step_0/task_0
//	Slurm (v2)             /system.slice/slurmstepd.scope/job_4242/step_0/user/task_0 (<node>_slurmstepd.scope with multiple slurmd)
//	systemd                /system.slice/sshd.service, /user.slice/user-1000.slice/session-3.scope

// attribution is what the cgroup paths of a process reveal, and the
// directory each owner id was read from.
type attribution struct {
	ContainerID, Runtime, PodUID, SlurmJobID, SystemdUnit string
	dirs                                                  ownerDirs
}

// ownerDirs are the directories whose names carry an attribution's ids.
type ownerDirs struct{ container, pod, slurmJob ownerDir }

// ownerDir is one cgroup directory: its path in the hierarchy of the v1
// controllers named ("" for cgroup v2).
type ownerDir struct{ hierarchy, path string }

// parseCgroup returns the lines of a cgroup file and what they reveal. The v2
// line is read first: on a hybrid host it is the one systemd and the
// container runtimes keep current; v1 lines fill what it lacks.
func parseCgroup(data string) ([]string, attribution) {
	lines := strings.Split(strings.TrimRight(data, "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return nil, attribution{}
	}
	var a attribution
	for _, pass := range []bool{true, false} {
		for _, line := range lines {
			_, rest, ok1 := strings.Cut(line, ":")
			hierarchy, path, ok2 := strings.Cut(rest, ":")
			if !ok1 || !ok2 || strings.HasPrefix(line, "0::") != pass {
				continue
			}
			a.fill(hierarchy, path)
		}
	}
	return lines, a
}

// scopePrefixes are the systemd scope names of container runtimes.
var scopePrefixes = []struct{ prefix, runtime string }{
	{"docker-", "docker"},
	{"cri-containerd-", "containerd"},
	{"crio-", "cri-o"},
	{"libpod-", "podman"},
}

// fill sets the fields of a still empty from one cgroup path of hierarchy.
// A job or pod id is read only where its manager puts it (slurmJobAnchor,
// kubepodsAnchor). The outermost id wins: a container that may write its
// own cgroup subtree names cgroups only below its own.
func (a *attribution) fill(hierarchy, path string) {
	elems := strings.Split(strings.Trim(path, "/"), "/")
	kubepods := -1 // the index of the anchored kubepods element
	unit := ""
	dir := func(i int) ownerDir { return ownerDir{hierarchy, "/" + strings.Join(elems[:i+1], "/")} }
	for i, e := range elems {
		// docker-<id>.scope, crio-<id>.scope, and cri-o's cgroupfs form crio-<id>.
		if id, rt := scopeContainer(e); id != "" {
			a.setContainer(id, rt, dir(i))
		}
		switch {
		case strings.HasSuffix(e, ".scope") || strings.HasSuffix(e, ".service"):
			unit = e // the innermost unit of the path
		case kubepods < 0 && kubepodsAnchor(elems, i):
			kubepods = i
		case kubepods >= 0 && i <= kubepods+2 && strings.Contains(e, "kubepods") && strings.HasSuffix(e, ".slice"):
			// kubepods-burstable-pod1a2b_3c4d.slice (or kubelet-kubepods-... under
			// a kubelet --cgroup-root): systemd cannot have '-' in a name part.
			if j := strings.LastIndex(e, "-pod"); j >= 0 {
				a.setPod(strings.ReplaceAll(strings.TrimSuffix(e[j+4:], ".slice"), "_", "-"), dir(i))
			}
		case kubepods >= 0 && i <= kubepods+2 && strings.HasPrefix(e, "pod"):
			a.setPod(e[3:], dir(i))
		case strings.HasPrefix(e, "job_") && isDigits(e[4:]) && slurmJobAnchor(elems, i):
			if a.SlurmJobID == "" {
				a.SlurmJobID, a.dirs.slurmJob = e[4:], dir(i)
			}
		case isHex64(e) && i > 0:
			// cgroupfs drivers: /docker/<id>, /kubepods/.../pod<uid>/<id>.
			rt := ""
			if elems[i-1] == "docker" {
				rt = "docker"
			}
			a.setContainer(e, rt, dir(i))
		}
	}
	if a.SystemdUnit == "" {
		a.SystemdUnit = unit
	}
}

// slurmJobAnchor reports whether elems[i] (job_N) is where slurmstepd puts
// a job: directly below /system.slice/slurmstepd.scope (or
// <node>_slurmstepd.scope with multiple slurmd) on cgroup v2, or
// /slurm/uid_N (/slurm_<node>/uid_N) on v1.
func slurmJobAnchor(elems []string, i int) bool {
	switch i {
	case 2:
		if elems[0] == "system.slice" && strings.HasSuffix(elems[1], "slurmstepd.scope") {
			return true
		}
		return (elems[0] == "slurm" || strings.HasPrefix(elems[0], "slurm_")) &&
			strings.HasPrefix(elems[1], "uid_") && isDigits(elems[1][4:])
	}
	return false
}

// kubepodsAnchor reports whether elems[i] is the kubelet's kubepods
// cgroup: kubepods(.slice) at the root, or kubepods (kubelet-kubepods.slice)
// directly below a kubelet --cgroup-root of /kubelet (/kubelet.slice).
func kubepodsAnchor(elems []string, i int) bool {
	switch i {
	case 0:
		return elems[0] == "kubepods" || elems[0] == "kubepods.slice"
	case 1:
		return elems[0] == "kubelet" && elems[1] == "kubepods" ||
			elems[0] == "kubelet.slice" && elems[1] == "kubelet-kubepods.slice"
	}
	return false
}

// scopeContainer finds the container id in a runtime's scope name, with or
// without ".scope" (cri-o's cgroupfs manager names the cgroup crio-<id>).
func scopeContainer(e string) (id, runtime string) {
	name := strings.TrimSuffix(e, ".scope")
	for _, sp := range scopePrefixes {
		if rest, ok := strings.CutPrefix(name, sp.prefix); ok && isHex64(rest) {
			return rest, sp.runtime
		}
	}
	return "", ""
}

func (a *attribution) setContainer(id, runtime string, dir ownerDir) {
	if a.ContainerID == "" {
		a.ContainerID, a.Runtime, a.dirs.container = id, runtime, dir
	}
}

func (a *attribution) setPod(uid string, dir ownerDir) {
	if a.PodUID == "" && uid != "" {
		a.PodUID, a.dirs.pod = uid, dir
	}
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// maxCgroupSets bounds the cgroup texts one worker keeps parsed: a tenant
// can put each of its processes in a cgroup of its own.
const maxCgroupSets = 4096

// cgroupOf returns the cgroup text data parsed, once per distinct text:
// most of a host's processes share a few cgroup sets (a service's, a
// session's, a job's), and parsing each again cost more than reading it.
// Past maxCgroupSets texts, a new one is parsed and not kept.
func (w *worker) cgroupOf(data []byte) *cgroupSet {
	if set, ok := w.cgroups[string(data)]; ok {
		return set
	}
	set := &cgroupSet{text: string(data)}
	set.parse(w.live)
	if len(w.cgroups) < maxCgroupSets {
		w.cgroups[set.text] = set
	}
	return set
}

// parse parses the set's text and, on the live procfs, reads the
// ownership of the cgroup directories that carry its owner ids: once per
// set, as the set is.
func (set *cgroupSet) parse(live bool) {
	set.lines, set.a = parseCgroup(set.text)
	if live {
		set.owners = readOwnerCgroups(set.a)
	}
}

// setCgroups records the cgroup set of process p and what it reveals.
func setCgroups(p *snapshot.Process, set *cgroupSet) {
	p.Cgroups = slices.Clone(set.lines) // each process's own: makeValidUTF8 edits in place
	a := set.a
	p.ContainerID, p.ContainerRuntime, p.PodUID, p.SlurmJobID, p.SystemdUnit =
		a.ContainerID, a.Runtime, a.PodUID, a.SlurmJobID, a.SystemdUnit
	p.OwnerCgroups = slices.Clone(set.owners)
}
