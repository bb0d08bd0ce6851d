package capture_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/nvmlread"
	"github.com/gpusnap/gpusnap/snapshot"
)

// procEntry writes one process into a proc root: pid holds and maps
// /dev/nvidia<minor>.
func procEntry(t *testing.T, root string, pid int, comm string, minor int) {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint(pid))
	for _, d := range []string{"fd", "fdinfo"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fields := make([]string, 52)
	for k := range fields {
		fields[k] = "0"
	}
	fields[0], fields[1], fields[2], fields[3], fields[21] = fmt.Sprint(pid), "("+comm+")", "S", "1", "5000"
	dev := fmt.Sprintf("/dev/nvidia%d", minor)
	files := map[string]string{
		"stat":     strings.Join(fields, " ") + "\n",
		"status":   fmt.Sprintf("Name:\t%s\nUid:\t0\t0\t0\t0\nNSpid:\t%d\n", comm, pid),
		"comm":     comm + "\n",
		"cmdline":  comm + "\x00",
		"maps":     "7f0000000000-7f0000200000 rw-s 00000000 00:06 500 " + dev + "\n",
		"cgroup":   "0::/\n",
		"fdinfo/3": "pos:\t0\nflags:\t0100002\nmnt_id:\t25\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(dev, filepath.Join(dir, "fd", "3")); err != nil {
		t.Fatal(err)
	}
}

// zombieEntry writes a defunct process into a proc root as the kernel shows
// one: state Z in stat, no exe, an empty command line and maps, no fds.
func zombieEntry(t *testing.T, root string, pid int, comm string) {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint(pid))
	for _, d := range []string{"fd", "fdinfo"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"stat":    fmt.Sprintf("%d (%s) Z 1 %d %d 0 -1 4227084 0 0 0 0 0 0 0 0 20 0 1 0 6000 0 0\n", pid, comm, pid, pid),
		"status":  fmt.Sprintf("Name:\t%s\nState:\tZ (zombie)\nUid:\t1000\t1000\t1000\t1000\nNSpid:\t%d\nThreads:\t1\n", comm, pid),
		"comm":    comm + "\n",
		"cmdline": "",
		"maps":    "",
		"cgroup":  "0::/system.slice/slurmstepd.scope/job_77/step_0\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The whole path: a proc root and the H100 fixture captured together, then joined.
func TestGPUUsageOfCapture(t *testing.T) {
	root := t.TempDir()
	for name, text := range map[string]string{
		"stat":    "cpu  1 2 3 4\nbtime 1764400000\n",
		"devices": "Character devices:\n195 nvidia-frontend\n",
	} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	procEntry(t, root, 4242, "python3", 0) // listed on GPU 0
	procEntry(t, root, 9999, "ghost", 5)   // holds GPU 5, where 12 GiB are used by nobody listed
	zombieEntry(t, root, 4244, "trainer")  // listed on GPU 2, exited, not reaped
	s, err := capture.Capture(context.Background(), capture.Options{ProcRoot: root,
		NVML: nvmlread.Options{FixturePath: filepath.Join("..", "fixtures", "nvml", "h100x8.json")}})
	if err != nil {
		t.Fatal(err)
	}
	u := snapshot.GPUUsage(s)
	if p := u[0].Processes[0]; p.PID != 4242 || p.Join != snapshot.JoinPID || p.Process == nil || p.Process.Comm != "python3" {
		t.Errorf("gpu 0: %+v", p)
	}
	if u[0].Unlisted != nil {
		t.Errorf("gpu 0 unlisted: %+v", u[0].Unlisted)
	}
	if p := u[1].Processes[0]; p.PID != 4243 || p.Join != snapshot.JoinNone {
		t.Errorf("gpu 1 (orphan): %+v", p)
	}
	if p := u[2].Processes[0]; p.PID != 4244 || p.Join != snapshot.JoinDefunct || p.Process == nil || p.Process.State != "Z" || p.Process.Threads != 1 ||
		!p.Process.Defunct() || p.Process.Comm != "trainer" || p.Process.Exe != "" || p.Process.SlurmJobID != "77" {
		t.Errorf("gpu 2 (a zombie): %+v, process %+v", p, p.Process)
	} else if strings.Contains(strings.Join(p.Process.Errors, "\n"), "exe") {
		t.Errorf("a zombie's missing exe is not an error: %q", p.Process.Errors)
	}
	g := u[5]
	if len(g.Unlisted) != 1 || g.Unlisted[0].PID != 9999 || len(g.Unlisted[0].Holders) != 1 || len(g.Unlisted[0].Mappings) != 1 {
		t.Fatalf("gpu 5 unlisted: %+v (process: %+v)", g.Unlisted, s.Processes)
	}
	if g.Unaccounted == nil || *g.Unaccounted != 12<<30 {
		t.Errorf("gpu 5 unaccounted: %v", g.Unaccounted)
	}
}
