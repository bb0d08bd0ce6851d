package capture

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/snapshot"
)

// Cgroup filesystem magic numbers (statfs f_type).
const (
	cgroup2Magic = 0x63677270
	cgroup1Magic = 0x27e0eb
)

// cgroupMountDir is where this host mounts the cgroup filesystems.
const cgroupMountDir = "/sys/fs/cgroup"

// maxOwnerDepth bounds the directories read above an owner id. A tenant can
// nest cgroups as deep as it likes, while a manager puts its ids a few levels down.
const maxOwnerDepth = 32

// CgroupV2Root is where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup,
// or /sys/fs/cgroup/unified on a hybrid host), or "" where none is.
func CgroupV2Root() string {
	for _, dir := range []string{cgroupMountDir, cgroupMountDir + "/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(dir, &st) == nil && st.Type == cgroup2Magic {
			return dir
		}
	}
	return ""
}

// CgroupOwner returns what one cgroup v2 path says about who runs the
// processes in it, and what the live cgroup filesystem says of the
// directories that carry those ids. watch names a process by the path of
// its cgroup id, under the owner rule the capture's snapshots are judged by.
func CgroupOwner(path string) (containerID, podUID, slurmJobID string, facts []snapshot.OwnerCgroup) {
	var a procfs.Attribution
	a.Fill("", path)
	return a.ContainerID, a.PodUID, a.SlurmJobID, readOwnerCgroups(a)
}

// readOwnerCgroups reads, for each owner id of a, the ownership of its
// directory and every directory above it in the live cgroup filesystem,
// the facts the owner rule (snapshot.OwnerDoubt) weighs. Nil where a has no
// id.
func readOwnerCgroups(a procfs.Attribution) []snapshot.OwnerCgroup {
	var facts []snapshot.OwnerCgroup
	for _, o := range []struct {
		owner, id string
		dir       procfs.OwnerDir
	}{
		{snapshot.OwnerSlurmJob, a.SlurmJobID, a.Dirs.SlurmJob},
		{snapshot.OwnerPod, a.PodUID, a.Dirs.Pod},
		{snapshot.OwnerContainer, a.ContainerID, a.Dirs.Container},
	} {
		if o.id == "" {
			continue
		}
		f := snapshot.OwnerCgroup{Owner: o.owner, Dir: o.dir.Path, Hierarchy: o.dir.Hierarchy}
		f.Delegated, f.Unread = delegation(o.dir)
		facts = append(facts, f)
	}
	return facts
}

// delegation walks from the hierarchy's root down to dir and names the
// first directory that a non-root uid owns, or whose cgroup.procs a
// non-root uid or group can write. unread says why the walk could not be
// made. Nothing is followed through a link, as cgroupfs has none, and a
// path element that is one is refused.
func delegation(dir procfs.OwnerDir) (delegated, unread string) {
	mount, err := hierarchyMount(dir.Hierarchy)
	if err != nil {
		return "", err.Error()
	}
	elems := strings.Split(strings.Trim(dir.Path, "/"), "/")
	if len(elems) > maxOwnerDepth {
		return "", fmt.Sprintf("%d levels deep, past the %d read", len(elems), maxOwnerDepth)
	}
	path := ""
	for _, e := range append([]string{""}, elems...) {
		if e == "." || e == ".." {
			return "", "a path element " + e
		}
		if e != "" {
			path += "/" + e
		}
		shown := path
		if shown == "" {
			shown = "/"
		}
		var d, procs unix.Stat_t
		if err := unix.Lstat(mount+path, &d); err != nil {
			return "", shown + ": " + errText(err)
		}
		if d.Mode&unix.S_IFMT != unix.S_IFDIR {
			return "", shown + ": not a directory"
		}
		if d.Uid != 0 {
			return fmt.Sprintf("%s is owned by uid %d", shown, d.Uid), ""
		}
		if err := unix.Lstat(mount+path+"/cgroup.procs", &procs); err != nil {
			return "", shown + "/cgroup.procs: " + errText(err)
		}
		if who := nonRootWriter(procs); who != "" {
			return fmt.Sprintf("%s/cgroup.procs is writable by %s", shown, who), ""
		}
	}
	return "", ""
}

// nonRootWriter names who other than root may write a file of st's owner
// and mode, or "".
func nonRootWriter(st unix.Stat_t) string {
	switch {
	case st.Uid != 0 && st.Mode&0o200 != 0:
		return fmt.Sprintf("uid %d", st.Uid)
	case st.Gid != 0 && st.Mode&0o020 != 0:
		return fmt.Sprintf("gid %d", st.Gid)
	case st.Mode&0o002 != 0:
		return "everyone"
	}
	return ""
}

// hierarchyMount is the mount of the cgroup hierarchy of the v1
// controllers named ("" for v2), checked by its filesystem type.
func hierarchyMount(hierarchy string) (string, error) {
	if hierarchy == "" {
		if root := CgroupV2Root(); root != "" {
			return root, nil
		}
		return "", errors.New("no cgroup v2 hierarchy mounted at " + cgroupMountDir)
	}
	name := strings.TrimPrefix(hierarchy, "name=")
	if strings.ContainsAny(name, "/") || name == "." || name == ".." {
		return "", errors.New("hierarchy " + hierarchy + ": not a mount name")
	}
	mount := cgroupMountDir + "/" + name
	var st unix.Statfs_t
	if err := unix.Statfs(mount, &st); err != nil {
		return "", fmt.Errorf("hierarchy %s: %w", hierarchy, err)
	}
	if st.Type != cgroup1Magic {
		return "", errors.New("hierarchy " + hierarchy + ": " + mount + " is no cgroup v1 mount")
	}
	return mount, nil
}
