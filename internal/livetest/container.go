package livetest

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpusnap/gpusnap/internal/testwait"
)

// requireContainers skips the test where the host refuses what a container
// runtime does (the namespaces, a tmpfs /dev or a mknod there), as in a
// container without CAP_SYS_ADMIN or on a locked-down kernel.
func requireContainers(t testing.TB) {
	t.Helper()
	Require(t, "unshare", "mount", "mknod", "sh")
	probe := exec.Command("unshare", "-m", "-p", "--fork", "--mount-proc", "sh", "-c",
		"mount -t tmpfs tmpfs /dev && mknod /dev/probe c 1 3")
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("live /proc test: this host refuses a container's namespaces or /dev: %v: %s", err, strings.TrimSpace(string(out)))
	}
}

// startContainer runs the tenant command (helper and its flags) the way a container
// runtime would place it, fills sc.Tenant and sc.Ghost with host PIDs, and
// registers the cleanup that kills the namespace by PID.
func startContainer(t testing.TB, tenant []string, loop *Loop, sc *Scenario) *Container {
	t.Helper()
	requireContainers(t)
	c := newCgroup(t)
	// Inside, sh mounts a private /dev like a container's and mknods the
	// node there. It runs the tenant as the namespace's init, which must
	// outlive the tenant or the kernel kills the ghost with it, then sleeps
	// until killed. runTenant appends the PID file as "$0".
	words := make([]string, len(tenant))
	for i, w := range tenant {
		words[i] = quote(w)
	}
	inner := fmt.Sprintf(`mount -t tmpfs tmpfs /dev && mknod -m 600 /dev/nvidia0 b %d %d && %s -p 3 /dev/nvidia0 "$0" && exec sleep infinity`,
		loop.Major, loop.Minor, strings.Join(words, " "))
	// Outside, sh joins the cgroup first, so every process below is born in
	// it. With --kill-child, should unshare die, its child (the init) dies
	// with it.
	outer := fmt.Sprintf(`echo $$ > %s && exec unshare -m -p --kill-child --mount-proc sh -c %s "$0"`,
		quote(filepath.Join(c.CgroupDir, "cgroup.procs")), quote(inner))
	// fd 3 is the host's /proc, which the tenant reads its host PID from.
	hostProc, err := os.Open("/proc")
	if err != nil {
		t.Fatalf("livetest: %v", err)
	}
	defer hostProc.Close()
	cmd := exec.Command("sh", "-c", outer)
	cmd.ExtraFiles = []*os.File{hostProc}
	t.Cleanup(func() {
		// Killing the init of a pid namespace kills all in it, by SIGKILL,
		// since an init ignores SIGTERM. Killing unshare, our child, covers
		// a namespace whose PIDs were never learnt (a failed start).
		for _, p := range []Proc{sc.Ghost, c.Init} {
			if err := p.kill(); err != nil {
				t.Errorf("livetest: container: %v", err)
			}
		}
		if cmd.Process == nil {
			return
		}
		_ = cmd.Process.Kill() // harmless once it has exited and been reaped
		pid := cmd.Process.Pid
		if err := testwait.For(waitLimit, fmt.Sprintf("unshare %d to be reaped", pid), func() bool {
			_, _, err := readStat(pid)
			return err != nil
		}); err != nil {
			t.Errorf("livetest: container: %v", err)
		}
	})
	procs, _ := runTenant(t, cmd, "tenant", "ghost")
	sc.Tenant, sc.Ghost = procs["tenant"], procs["ghost"]
	if c.Init, err = nsInit(cmd.Process.Pid); err != nil {
		t.Fatalf("livetest: container init: %v", err)
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", sc.Ghost.PID))
	if err != nil {
		t.Fatalf("livetest: %v", err)
	}
	c.PIDNamespace = ns
	return c
}

// nsInit returns the pid namespace's init, the one child of unshare --fork.
func nsInit(unshare int) (Proc, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", unshare, unshare))
	if err != nil {
		return Proc{}, err
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		return Proc{}, fmt.Errorf("unshare %d has children %q, want one", unshare, f)
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		return Proc{}, err
	}
	return newProc(pid, 1)
}

// newCgroup makes docker-<64 hex>.scope in the cgroup v2 hierarchy, or in a
// v1 hierarchy where there is no v2 one, and removes it on cleanup, after the
// processes in it are killed, as cleanups run last registered first.
func newCgroup(t testing.TB) *Container {
	t.Helper()
	var id [32]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails on Linux
	name := "docker-" + hex.EncodeToString(id[:]) + ".scope"
	c := &Container{ID: hex.EncodeToString(id[:])}
	c.CgroupDir, c.CgroupPath = makeCgroup(t, name)
	return c
}

// Cgroup makes a cgroup of its own for a test at the top of the hierarchy
// cgroupMount finds, returning its directory (write a PID to its
// cgroup.procs to move the process there) and the path /proc/PID/cgroup
// shows. It is removed on cleanup, after the processes in it are killed.
func Cgroup(t testing.TB) (dir, path string) {
	t.Helper()
	var id [8]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails on Linux
	return makeCgroup(t, "gpusnap-test-"+hex.EncodeToString(id[:]))
}

// makeCgroup makes a cgroup named name at the top of the hierarchy
// cgroupMount finds, returning its directory and the path /proc/PID/cgroup
// shows, and removes it on cleanup, after the processes in it are killed, as
// cleanups run last registered first.
func makeCgroup(t testing.TB, name string) (dir, path string) {
	t.Helper()
	mnt, root, err := cgroupMount()
	if err != nil {
		t.Skipf("live /proc test: no cgroup hierarchy to place a process in: %v", err)
	}
	dir, path = filepath.Join(mnt, name), filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("live /proc test: cannot create a cgroup here: %v", err)
	}
	t.Cleanup(func() {
		// A cgroup stays busy for a moment after its last process dies.
		err := testwait.For(waitLimit, "cgroup "+dir+" to empty", func() bool {
			err := syscall.Rmdir(dir)
			return err == nil || errors.Is(err, syscall.ENOENT)
		})
		if err != nil {
			t.Errorf("livetest: %v", err)
		}
	})
	return dir, path
}

// cgroupMount finds where to make a cgroup, in the cgroup2 mount if there is
// one (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host), else the
// name=systemd v1 hierarchy, else any v1 one. root is the mount's root within
// the hierarchy, the prefix of the paths /proc/PID/cgroup shows.
func cgroupMount() (mnt, root string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	var v1, v1systemd [2]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 3 {
			continue
		}
		switch {
		case b[0] == "cgroup2":
			return a[4], a[3], nil
		case b[0] == "cgroup" && strings.Contains(","+b[2]+",", ",name=systemd,"):
			v1systemd = [2]string{a[4], a[3]}
		case b[0] == "cgroup" && v1[0] == "":
			v1 = [2]string{a[4], a[3]}
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", err
	}
	for _, m := range [][2]string{v1systemd, v1} {
		if m[0] != "" {
			return m[0], m[1], nil
		}
	}
	return "", "", errors.New("no cgroup or cgroup2 mount in /proc/self/mountinfo")
}

// quote makes s one word for sh.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
