package capture_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testwait"
	"github.com/gpusnap/gpusnap/provenance"
	"github.com/gpusnap/gpusnap/snapshot"
)

// mapWithPython runs python (the interpreter at that path) mapping node
// MAP_SHARED read-write, with each of libs loaded (ctypes), until the test
// ends, and returns its PID.
func mapWithPython(t testing.TB, python, node string, libs ...string) int {
	t.Helper()
	cmd := exec.Command(python, append([]string{"-c", `import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 65536, mmap.MAP_SHARED)
for lib in sys.argv[2:]:
    import ctypes
    ctypes.CDLL(lib)
print("ready", flush=True)
time.sleep(3600)`, node}, libs...)...)
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

// A capture keeps what it hashed in its binary cache, and the next reuses a
// binary's digest while its path, inode, size, mtime and ctime hold: the
// digest planted in the cache is what the second capture reports (it read
// no byte of the binary). A chmod moves the ctime alone, and the binary is
// read again.
func TestLiveBinaryCacheReuse(t *testing.T) {
	livetest.Require(t)
	loop := livetest.NewLoop(t)
	dir := t.TempDir()
	exe := filepath.Join(dir, "bin", "solver")
	w := livetest.StartWorker(t, loop.Node, livetest.WorkerOptions{Exe: exe})
	cache := filepath.Join(dir, "gpusnap.db.binaries")
	opts := capture.Options{BinaryCache: cache}
	captureTenant := func() *snapshot.Process {
		t.Helper()
		snap, err := capture.Capture(t.Context(), opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range snap.Scan.Errors {
			if strings.HasPrefix(e, "binary cache") {
				t.Errorf("scan note: %s", e)
			}
		}
		return mustFind(t, snap, w.Proc, "worker")
	}
	want := sha256File(t, exe)
	if p := captureTenant(); p.HashStatus != snapshot.HashOK || p.ExeSHA256 != want {
		t.Fatalf("first capture: %s %q, want ok %s", p.HashStatus, p.ExeSHA256, want)
	}
	data, err := os.ReadFile(cache)
	if err != nil {
		t.Fatalf("the capture kept no binary cache: %v", err)
	}
	if !strings.Contains(string(data), want) {
		t.Fatalf("the cache lacks the worker's digest %s: %s", want, data)
	}
	planted := strings.Repeat("ab", 32)
	if err := os.WriteFile(cache, []byte(strings.ReplaceAll(string(data), want, planted)), 0o600); err != nil {
		t.Fatal(err)
	}
	if p := captureTenant(); p.ExeSHA256 != planted {
		t.Errorf("an unchanged binary was read again: %q, want the cached %s", p.ExeSHA256, planted)
	}
	testwait.ClockPast(t, exe)
	if err := os.Chmod(exe, 0o750); err != nil {
		t.Fatal(err)
	}
	if p := captureTenant(); p.ExeSHA256 != want {
		t.Errorf("after a chmod (a new ctime): %q, want it hashed again: %s", p.ExeSHA256, want)
	}
	// A damaged cache is a note and a fresh hash, never a failure.
	if err := os.WriteFile(cache, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	snap, err := capture.Capture(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if p := mustFind(t, snap, w.Proc, "worker"); p.ExeSHA256 != want {
		t.Errorf("over a damaged cache: %q, want %s", p.ExeSHA256, want)
	}
	if !strings.Contains(strings.Join(snap.Scan.Errors, "\n"), "binary cache: "+cache) {
		t.Errorf("a damaged cache left no note: %q", snap.Scan.Errors)
	}
}

// The owner of an exe path found in the dpkg database is kept while the
// database's stamp holds: a .list edited in place (which dpkg never does)
// is not read again, and a .list renamed into place (as dpkg installs)
// makes every path looked up again.
func TestLiveBinaryCacheOwners(t *testing.T) {
	livetest.Require(t)
	real, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		t.Fatalf("/usr/bin/python3: %v (.ci/run installs python3-minimal)", err)
	}
	db := t.TempDir()
	info := filepath.Join(db, "info")
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(info, 0o755); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(db, "status"), "Package: planted\n")
	write(filepath.Join(info, "planted.list"), "/.\n"+real+"\n")
	loop := livetest.NewLoop(t)
	pid := mapWithPython(t, real, loop.Node)
	opts := capture.Options{DpkgDir: db, BinaryCache: filepath.Join(t.TempDir(), "cache")}
	owner := func() string {
		t.Helper()
		snap, err := capture.Capture(t.Context(), opts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range snap.Processes {
			if p := &snap.Processes[i]; p.PID == pid && p.Package != nil {
				return p.Package.Name
			}
		}
		t.Fatalf("pid %d has no package", pid)
		return ""
	}
	if got := owner(); got != "planted" {
		t.Fatalf("owner %q, want planted", got)
	}
	write(filepath.Join(info, "planted.list"), "/.\n")
	if got := owner(); got != "planted" {
		t.Errorf("a .list edited in place under the same stamp: owner %q, want the cached planted", got)
	}
	testwait.ClockPast(t, info)
	write(filepath.Join(info, "other.list-new"), "/usr/bin/other\n")
	if err := os.Rename(filepath.Join(info, "other.list-new"), filepath.Join(info, "other.list")); err != nil {
		t.Fatal(err)
	}
	if got := owner(); got != "" {
		t.Errorf("after an install (a .list renamed in): owner %q, want none (looked up again)", got)
	}
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// A library the tenant brought, loaded by an unmodified packaged program
// with no loader variable to show for it (dlopen), is code the program's
// file does not vouch for. Where the host's dpkg database does not list it,
// and on a host with no dpkg database, where it lies outside the
// directories only packages install into. The program's own packaged
// libraries are neither.
func TestLiveForeignCodeTheProgramLoaded(t *testing.T) {
	livetest.Require(t, "gcc")
	python, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		t.Fatalf("/usr/bin/python3: %v (.ci/run installs python3-minimal)", err)
	}
	dir, err := os.MkdirTemp("/var/lib", "gpusnap-code-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	src, lib := filepath.Join(dir, "tenant.c"), filepath.Join(dir, "libtenant.so")
	if err := os.WriteFile(src, []byte("int tenant(void) { return 1; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
	loop := livetest.NewLoop(t)
	pid := mapWithPython(t, python, loop.Node, lib)
	for _, tc := range []struct{ name, dpkg, want string }{
		{"the host's dpkg database", "", lib + ": no package installed it"},
		{"no dpkg database", filepath.Join(t.TempDir(), "none"), lib + ": no package database, and outside the packaged directories"},
	} {
		snap, err := capture.Capture(t.Context(), capture.Options{DpkgDir: tc.dpkg, BinaryCache: filepath.Join(t.TempDir(), "cache")})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(snap.Processes, func(p snapshot.Process) bool { return p.PID == pid })
		if i < 0 || snap.Processes[i].ForeignCode == nil {
			t.Fatalf("%s: pid %d not captured with its code read", tc.name, pid)
		}
		mapped := snap.Processes[i].ForeignCode.Mapped
		if !slices.Contains(mapped, tc.want) {
			t.Errorf("%s: mapped %q, want %q", tc.name, mapped, tc.want)
		}
		for _, m := range mapped {
			if strings.HasPrefix(m, "/usr/") {
				t.Errorf("%s: a packaged library named: %q", tc.name, m)
			}
		}
	}
}
