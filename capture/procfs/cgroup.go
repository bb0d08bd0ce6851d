package procfs

import "strings"

// /proc/PID/cgroup is one line per hierarchy, "ID:controllers:path" (cgroup
// v2 "0::/path"). The paths name who runs the process.
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

// Attribution is what the cgroup paths of a process reveal, and the
// directory each owner id was read from.
type Attribution struct {
	ContainerID, Runtime, PodUID, SlurmJobID, SystemdUnit string
	Dirs                                                  OwnerDirs
}

// OwnerDirs are the directories whose names carry an Attribution's ids.
type OwnerDirs struct{ Container, Pod, SlurmJob OwnerDir }

// OwnerDir is one cgroup directory, its path in the hierarchy of the v1
// controllers named ("" for cgroup v2).
type OwnerDir struct{ Hierarchy, Path string }

// ParseCgroup returns the lines of a cgroup file and what they reveal. The v2
// line is read first, since on a hybrid host it is the one systemd and the
// container runtimes keep current. v1 lines fill what it lacks.
func ParseCgroup(data string) ([]string, Attribution) {
	lines := strings.Split(strings.TrimRight(data, "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return nil, Attribution{}
	}
	var a Attribution
	for _, pass := range []bool{true, false} {
		for _, line := range lines {
			_, rest, ok1 := strings.Cut(line, ":")
			hierarchy, path, ok2 := strings.Cut(rest, ":")
			if !ok1 || !ok2 || strings.HasPrefix(line, "0::") != pass {
				continue
			}
			a.Fill(hierarchy, path)
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

// Fill sets the fields of a still empty from one cgroup path of hierarchy.
// A job or pod id is read only where its manager puts it (slurmJobAnchor,
// kubepodsAnchor). The outermost id wins, as a container that may write its
// own cgroup subtree names cgroups only below its own.
func (a *Attribution) Fill(hierarchy, path string) {
	elems := strings.Split(strings.Trim(path, "/"), "/")
	kubepods := -1 // the index of the anchored kubepods element
	unit := ""
	dir := func(i int) OwnerDir { return OwnerDir{hierarchy, "/" + strings.Join(elems[:i+1], "/")} }
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
			// a kubelet --cgroup-root). systemd cannot have '-' in a name part.
			if j := strings.LastIndex(e, "-pod"); j >= 0 {
				a.setPod(strings.ReplaceAll(strings.TrimSuffix(e[j+4:], ".slice"), "_", "-"), dir(i))
			}
		case kubepods >= 0 && i <= kubepods+2 && strings.HasPrefix(e, "pod"):
			a.setPod(e[3:], dir(i))
		case strings.HasPrefix(e, "job_") && isDigits(e[4:]) && slurmJobAnchor(elems, i):
			if a.SlurmJobID == "" {
				a.SlurmJobID, a.Dirs.SlurmJob = e[4:], dir(i)
			}
		case isHex64(e) && i > 0:
			// The cgroupfs drivers' /docker/<id> and /kubepods/.../pod<uid>/<id>.
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
// a job, directly below /system.slice/slurmstepd.scope (or
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
// cgroup, kubepods(.slice) at the root or kubepods (kubelet-kubepods.slice)
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

func (a *Attribution) setContainer(id, runtime string, dir OwnerDir) {
	if a.ContainerID == "" {
		a.ContainerID, a.Runtime, a.Dirs.Container = id, runtime, dir
	}
}

func (a *Attribution) setPod(uid string, dir OwnerDir) {
	if a.PodUID == "" && uid != "" {
		a.PodUID, a.Dirs.Pod = uid, dir
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
