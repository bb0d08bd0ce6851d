package main

import (
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
)

// preloadSource is a library whose constructor maps $GPU_NODE rw-s before
// the program it is preloaded into runs a line of its own.
const preloadSource = `#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
__attribute__((constructor)) static void grab(void) {
	const char *node = getenv("GPU_NODE");
	int fd = node ? open(node, O_RDWR) : -1;
	if (fd >= 0)
		mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
}
`

// An allow entry for a packaged program (exe=/usr/bin/sleep) vouches for
// that file: the unmodified program run with the tenant's LD_PRELOAD
// library, whose constructor maps the GPU rw-s, by root and by a user, is
// no expected workload: diff and check both exit 1.
func TestLivePreloadIntoAnAllowedProgram(t *testing.T) {
	livetest.Require(t, "losetup", "gcc", "setpriv")
	if _, err := os.Stat("/usr/bin/sleep"); err != nil {
		t.Skip("live /proc test: no /usr/bin/sleep to allow")
	}
	loop := livetest.NewLoop(t)
	const tenant = "live-preload"
	flags := liveBaseline(t, tenant)
	dir, node := everyonesNode(t, loop)
	lib := preloadLibrary(t, dir)
	var pids []int
	for _, user := range [][]string{nil, {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}} {
		args := append(append([]string{}, user...), "/usr/bin/sleep", "1000")
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, "GPU_NODE="+node)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		livetest.WaitMapped(t, cmd.Process.Pid, "rw-s", node)
		pids = append(pids, cmd.Process.Pid)
	}

	allow, r := diffAllowing(t, tenant, flags, "exe=/usr/bin/sleep")
	for _, pid := range pids {
		n := 0
		for _, f := range r.Findings {
			if f.Process != nil && f.Process.PID == pid {
				n++
				if f.Severity == diff.Info || f.Allowed != "" {
					t.Errorf("pid %d: %s allowed by %q", pid, f.Kind, f.Allowed)
				}
			}
		}
		if n == 0 {
			t.Errorf("no finding for pid %d (sleep with LD_PRELOAD)", pid)
		}
	}
	if code, _, stderr := gpusnap(t, "check", "--json", "--no-nvml", "--allow", allow); code != 1 {
		t.Errorf("check: exit %d, want 1: %s", code, stderr)
	}
}

// preloadLibrary builds preloadSource into dir and returns its path.
func preloadLibrary(t *testing.T, dir string) string {
	t.Helper()
	lib := filepath.Join(dir, "libgrab.so")
	src := filepath.Join(dir, "grab.c")
	if err := os.WriteFile(src, []byte(preloadSource), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
	return lib
}

// The same refusal holds for a process that uses no GPU: the packaged
// sleep run with the tenant's LD_PRELOAD library, whose constructor maps a
// device that is no GPU (the loop device's own node) rw-s, is an
// other_device_mapping that exe=/usr/bin/sleep does not allow. The capture
// reads the code of every process that maps a device or could not be read,
// not only of GPU users.
func TestLivePreloadIntoAnAllowedProgramOffTheGPU(t *testing.T) {
	livetest.Require(t, "losetup", "gcc")
	if _, err := os.Stat("/usr/bin/sleep"); err != nil {
		t.Skip("live /proc test: no /usr/bin/sleep to allow")
	}
	loop := livetest.NewLoop(t)
	const tenant = "live-preload-other"
	flags := liveBaseline(t, tenant)
	lib := preloadLibrary(t, binDir(t, "gpusnap-preload-"))
	cmd := exec.Command("/usr/bin/sleep", "1000")
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, "GPU_NODE="+loop.Dev)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	livetest.WaitMapped(t, pid, "rw-s", loop.Dev)
	allow := filepath.Join(t.TempDir(), "allow.list")
	if err := os.WriteFile(allow, []byte("exe=/usr/bin/sleep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := gpusnap(t, append([]string{"diff", "--json", "--tenant", tenant, "--allow", allow}, flags...)...)
	if code == 2 {
		t.Fatalf("diff: exit 2: %s", stderr)
	}
	found := false
	for _, f := range decodeResult(t, stdout, stderr).Findings {
		if f.Process == nil || f.Process.PID != pid {
			continue
		}
		found = found || f.Kind == diff.KindOtherDeviceMapping
		if f.Allowed != "" {
			t.Errorf("pid %d: %s allowed by %q", pid, f.Kind, f.Allowed)
		}
	}
	if !found {
		t.Errorf("no other_device_mapping of %s for pid %d (sleep with LD_PRELOAD)", loop.Dev, pid)
	}
}

// mapperSource maps the node argv[1] names MAP_SHARED read-write and sleeps:
// a packaged interpreter doing GPU work with no code of the tenant's beside
// its own files.
const mapperSource = `import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 4096)
time.sleep(1000)`

// An exe allow entry that names no cgroup, container or pod speaks of the
// host's program. The unmodified packaged interpreter it names, mapping the
// GPU rw-s, passes it on the host, and does not in a mount namespace of its
// own (root's, or the root of a user namespace that uid 65534 made), whose
// paths are another root's, nor in a container's or a pod's cgroup.
func TestLiveAllowedExeOnlyOnTheHost(t *testing.T) {
	livetest.Require(t, "losetup", "setpriv", "unshare", "/usr/bin/python3")
	root := capture.CgroupV2Root()
	if root == "" {
		t.Skip("live /proc test: no cgroup v2 hierarchy to make a container's cgroup in")
	}
	python, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		t.Fatal(err)
	}
	_, node := everyonesNode(t, livetest.NewLoop(t))
	const tenant = "live-allow-host"
	flags := liveBaseline(t, tenant)
	container := filepath.Join(root, "docker-"+hex.EncodeToString(randomBytes(32))+".scope")
	if err := os.Mkdir(container, 0o755); err != nil {
		t.Skipf("live /proc test: cannot create a cgroup here: %v", err)
	}
	t.Cleanup(func() { removeCgroup(t, root, container) })
	nobody := []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}
	places := []struct {
		name   string
		prefix []string
		join   func(pid int)
		allow  bool
	}{
		{"the host", nil, nil, true},
		{"a container's cgroup", nil, func(pid int) { writeProcs(t, container, pid) }, false},
		{"a pod's cgroup", nil, livetest.PodCgroup(t, "0e1d2c3b-4a59-4687-9a0b-1c2d3e4f5a6b"), false},
		{"root's mount namespace", []string{"unshare", "-m"}, nil, false},
		{"uid 65534's user and mount namespace", append(nobody, "unshare", "-U", "-r", "-m"), nil, false},
	}
	pids := make([]int, len(places))
	for i, place := range places {
		args := append(append([]string{}, place.prefix...), python, "-c", mapperSource, node)
		cmd := exec.Command(args[0], args[1:]...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		livetest.WaitMapped(t, cmd.Process.Pid, "rw-s", node)
		if place.join != nil {
			place.join(cmd.Process.Pid)
		}
		pids[i] = cmd.Process.Pid
	}

	_, r := diffAllowing(t, tenant, flags, "exe="+python)
	for i, place := range places {
		n := 0
		for _, f := range r.Findings {
			if f.Process == nil || f.Process.PID != pids[i] {
				continue
			}
			n++
			if allowed := f.Allowed != ""; allowed != place.allow {
				t.Errorf("%s: %s allowed %q, want allowed %v", place.name, f.Kind, f.Allowed, place.allow)
			}
		}
		if n == 0 {
			t.Errorf("%s: no finding for pid %d", place.name, pids[i])
		}
	}
}

// everyonesNode makes a node of loop that any uid may open read-write, in a
// directory under /var/lib any uid may enter, removed at cleanup.
func everyonesNode(t *testing.T, loop *livetest.Loop) (dir, node string) {
	t.Helper()
	dir = binDir(t, "gpusnap-node-")
	node = filepath.Join(dir, "dev", "nvidia0")
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Dir(node), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(node, syscall.S_IFBLK|0o666, int(unix.Mkdev(loop.Major, loop.Minor))); err != nil {
		t.Skipf("live /proc test: mknod refused: %v", err)
	}
	if err := os.Chmod(node, 0o666); err != nil {
		t.Fatal(err)
	}
	return dir, node
}

// diffAllowing writes an allow list of the one entry and runs diff --json of
// tenant with it, which must exit 1, returning the list's path and the result.
func diffAllowing(t *testing.T, tenant string, flags []string, entry string) (allow string, r diff.Result) {
	t.Helper()
	allow = filepath.Join(t.TempDir(), "allow.list")
	if err := os.WriteFile(allow, []byte(entry+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := gpusnap(t, append([]string{"diff", "--json", "--tenant", tenant, "--allow", allow}, flags...)...)
	if code != 1 {
		t.Errorf("diff: exit %d, want 1: %s", code, stderr)
	}
	return allow, decodeResult(t, stdout, stderr)
}
