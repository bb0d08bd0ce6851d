package capture_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/provenance"
	"github.com/gpusnap/gpusnap/snapshot"
)

// mapWithPython runs python (the interpreter at that path) mapping node
// MAP_SHARED read-write until the test ends, and returns its PID.
func mapWithPython(t *testing.T, python, node string) int {
	t.Helper()
	cmd := exec.Command(python, "-c", `import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 65536, mmap.MAP_SHARED)
print("ready", flush=True)
time.sleep(3600)`, node)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", python, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("%s did not map %s: %q %v", python, node, line, err)
	}
	livetest.WaitMapped(t, cmd.Process.Pid, "rw-s", node)
	return cmd.Process.Pid
}

// The interpreter the host's dpkg installed is verified; a byte-identical
// copy of it elsewhere has the same SHA-256 and is not packaged: a binary's
// hash alone does not say where it came from.
func TestLiveExeHashAndPackage(t *testing.T) {
	livetest.Require(t)
	real, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		t.Fatalf("/usr/bin/python3: %v (.ci/run installs python3-minimal)", err)
	}
	if _, err := os.Stat(provenance.DefaultDir + "/info"); err != nil {
		t.Skipf("no dpkg database on this host: %v", err)
	}
	data, err := os.ReadFile(real)
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(t.TempDir(), "python3")
	if err := os.WriteFile(copyPath, data, 0o755); err != nil {
		t.Fatal(err)
	}
	loop := livetest.NewLoop(t)
	realPID := mapWithPython(t, real, loop.Node)
	copyPID := mapWithPython(t, copyPath, loop.Node)
	snap := captureLive(t)
	byPID := map[int]*snapshot.Process{}
	for i := range snap.Processes {
		byPID[snap.Processes[i].PID] = &snap.Processes[i]
	}
	r, c := byPID[realPID], byPID[copyPID]
	if r == nil || c == nil {
		t.Fatalf("the snapshot lacks pid %d or %d", realPID, copyPID)
	}
	owner, err := exec.Command("dpkg", "-S", real).Output()
	if err != nil {
		t.Fatalf("dpkg -S %s: %v", real, err)
	}
	pkg, _, _ := strings.Cut(strings.TrimSpace(string(owner)), ": ")
	if r.Package == nil || r.Package.Status != provenance.Verified || r.Package.Name != pkg {
		t.Errorf("%s (pid %d): package %+v, want %s verified (errors %q)", real, realPID, r.Package, pkg, r.Errors)
	}
	if c.Package == nil || c.Package.Status != provenance.NotPackaged || c.Package.Name != "" {
		t.Errorf("%s (pid %d): package %+v, want not packaged", copyPath, copyPID, c.Package)
	}
	sum, err := exec.Command("sha256sum", real).Output()
	if err != nil {
		t.Fatal(err)
	}
	want, _, _ := strings.Cut(string(sum), " ")
	for _, p := range []*snapshot.Process{r, c} {
		if p.HashStatus != snapshot.HashOK || p.ExeSHA256 != want {
			t.Errorf("pid %d (%s): hash %s %q, want ok %s (sha256sum)", p.PID, p.Exe, p.HashStatus, p.ExeSHA256, want)
		}
	}
	// No process that uses no GPU is hashed: the cost is bounded by GPU users.
	for _, p := range snap.Processes {
		if p.HashStatus != "" && !p.UsesNVIDIA() {
			t.Errorf("pid %d (%s) uses no GPU, yet was hashed", p.PID, p.Comm)
		}
	}
}

// Past --hash-limit an exe is too_large and has no hash; a deleted exe is
// still hashed through /proc/PID/exe.
func TestLiveExeHashLimitAndDeleted(t *testing.T) {
	livetest.Require(t)
	loop := livetest.NewLoop(t)
	exe := filepath.Join(t.TempDir(), "tenant")
	w := livetest.StartWorker(t, loop.Node, livetest.WorkerOptions{Exe: exe})
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(exe); err != nil {
		t.Fatal(err)
	}
	snap, err := capture.Capture(t.Context(), capture.Options{HashLimit: int64(len(data))})
	if err != nil {
		t.Fatal(err)
	}
	p := mustFind(t, snap, w.Proc, "worker")
	if !p.ExeDeleted || p.HashStatus != snapshot.HashOK || p.ExeSHA256 == "" {
		t.Errorf("deleted exe: deleted %v, hash %s %q, want ok", p.ExeDeleted, p.HashStatus, p.ExeSHA256)
	}
	snap, err = capture.Capture(t.Context(), capture.Options{HashLimit: int64(len(data)) - 1})
	if err != nil {
		t.Fatal(err)
	}
	p = mustFind(t, snap, w.Proc, "worker")
	if p.HashStatus != snapshot.HashTooLarge || p.ExeSHA256 != "" {
		t.Errorf("exe of %d bytes, limit one less: hash %s %q, want too_large and none", len(data), p.HashStatus, p.ExeSHA256)
	}
}
