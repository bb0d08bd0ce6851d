package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

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
	dir, err := os.MkdirTemp("/var/lib", "gpusnap-preload-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	node := filepath.Join(dir, "dev", "nvidia0")
	lib := filepath.Join(dir, "libgrab.so")
	src := filepath.Join(dir, "grab.c")
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
	if err := os.WriteFile(src, []byte(preloadSource), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
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

	allow := filepath.Join(t.TempDir(), "allow.list")
	if err := os.WriteFile(allow, []byte("exe=/usr/bin/sleep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := gpusnap(t, append([]string{"diff", "--json", "--tenant", tenant, "--allow", allow}, flags...)...)
	if code != 1 {
		t.Errorf("diff: exit %d, want 1: %s", code, stderr)
	}
	r := decodeResult(t, stdout, stderr)
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
