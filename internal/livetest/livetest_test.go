package livetest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// status returns the value of a field of /proc/PID/status.
func status(t *testing.T, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	t.Fatalf("pid %d: no %s in status", pid, field)
	return ""
}

// fdsOn returns the fds of pid whose link target is path, with the octal flags of each.
func fdsOn(t *testing.T, pid int, path string) map[string]string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fds := map[string]string{}
	for _, e := range ents {
		if target, _ := os.Readlink(filepath.Join(dir, e.Name())); target == path {
			info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(string(info), "\n") {
				if v, ok := strings.CutPrefix(line, "flags:"); ok {
					fds[e.Name()] = strings.TrimSpace(v)
				}
			}
		}
	}
	return fds
}

// checkDeviceOfMapping checks, through map_files, that pid maps loop's device at path.
func checkDeviceOfMapping(t *testing.T, pid int, path string, loop *Loop) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if perms, p := mapsPermsPath(line); p == path && perms == "rw-s" {
			var st syscall.Stat_t
			if err := syscall.Stat(fmt.Sprintf("/proc/%d/map_files/%s", pid, strings.Fields(line)[0]), &st); err != nil {
				t.Fatal(err)
			}
			if st.Mode&syscall.S_IFMT != syscall.S_IFBLK || major(st.Rdev) != loop.Major || minor(st.Rdev) != loop.Minor {
				t.Errorf("map_files of %s: mode %o dev %d:%d, want block %s", path, st.Mode, major(st.Rdev), minor(st.Rdev), loop.DeviceNumber())
			}
			return
		}
	}
	t.Errorf("pid %d does not map %s rw-s:\n%s", pid, path, b)
}

// checkFDs checks that pid holds path twice: read-write and read-only.
func checkFDs(t *testing.T, pid int, path string) {
	t.Helper()
	modes := map[string]bool{}
	for _, flags := range fdsOn(t, pid, path) {
		var f int
		if _, err := fmt.Sscanf(flags, "%o", &f); err != nil {
			t.Fatal(err)
		}
		modes[[]string{"r", "w", "rw"}[f&3]] = true
	}
	if len(modes) != 2 || !modes["rw"] || !modes["r"] {
		t.Errorf("pid %d holds %s with modes %v, want rw and r", pid, path, modes)
	}
}

func TestMkdevRoundTrip(t *testing.T) {
	for _, d := range [][2]uint32{{7, 0}, {7, 300}, {195, 255}, {259, 1 << 19}, {4095, 255}, {4096, 1}} {
		dev := mkdev(d[0], d[1])
		if major(dev) != d[0] || minor(dev) != d[1] {
			t.Errorf("mkdev(%d, %d) = %#x: back to %d:%d", d[0], d[1], dev, major(dev), minor(dev))
		}
	}
}

func TestGhostSurvivesItsTenant(t *testing.T) {
	var sc *Scenario
	t.Run("scenario", func(t *testing.T) {
		loop := NewLoop(t)
		sc = StartGhost(t, loop, Options{})
		if sc.Tenant.Alive() {
			t.Errorf("tenant %d still runs", sc.Tenant.PID)
		}
		if !sc.Ghost.Alive() {
			t.Fatalf("ghost %d is not running", sc.Ghost.PID)
		}
		if ppid := status(t, sc.Ghost.PID, "PPid"); ppid == fmt.Sprint(sc.Tenant.PID) {
			t.Errorf("ghost's parent is still the tenant %s", ppid)
		}
		if sid := status(t, sc.Ghost.PID, "NSsid"); sid != fmt.Sprint(sc.Ghost.PID) {
			t.Errorf("ghost's session is %s, want its own", sid)
		}
		if comm := status(t, sc.Ghost.PID, "Name"); comm != "tenant" {
			t.Errorf("ghost's comm is %q", comm)
		}
		checkDeviceOfMapping(t, sc.Ghost.PID, loop.Node, loop)
		checkFDs(t, sc.Ghost.PID, loop.Node)
		// Kill is what a test calls to end the ghost early; Cleanup calls it again, harmlessly.
		sc.Ghost.Kill(t)
		if sc.Ghost.Alive() {
			t.Errorf("ghost %d survived Kill", sc.Ghost.PID)
		}
	})
	if sc == nil {
		return // skipped
	}
	if sc.Ghost.Alive() {
		t.Errorf("cleanup left ghost %d running", sc.Ghost.PID)
	}
	if _, err := os.Stat(fmt.Sprintf("/sys/block/%s/loop/backing_file", filepath.Base(sc.Loop.Dev))); err == nil {
		// Another test may already have attached the freed device: only ours must be gone.
		b, _ := os.ReadFile(fmt.Sprintf("/sys/block/%s/loop/backing_file", filepath.Base(sc.Loop.Dev)))
		if strings.HasPrefix(string(b), filepath.Dir(filepath.Dir(sc.Loop.Node))) {
			t.Errorf("cleanup left %s attached to %s", sc.Loop.Dev, b)
		}
	}
}

func TestContainerGhost(t *testing.T) {
	var sc *Scenario
	t.Run("scenario", func(t *testing.T) {
		loop := NewLoop(t)
		sc = StartGhost(t, loop, Options{Container: true, GhostComm: "python3"})
		c := sc.Container
		if comm := status(t, sc.Ghost.PID, "Name"); comm != "python3" {
			t.Errorf("ghost's comm is %q, want python3", comm)
		}
		if len(c.ID) != 64 {
			t.Errorf("container id %q", c.ID)
		}
		if sc.Tenant.Alive() || !sc.Ghost.Alive() || !c.Init.Alive() {
			t.Fatalf("tenant alive %v, ghost alive %v, init alive %v; want false, true, true",
				sc.Tenant.Alive(), sc.Ghost.Alive(), c.Init.Alive())
		}
		if ppid := status(t, sc.Ghost.PID, "PPid"); ppid != fmt.Sprint(c.Init.PID) {
			t.Errorf("ghost's parent is %s, want the namespace's init %d", ppid, c.Init.PID)
		}
		want := fmt.Sprintf("%d %d", sc.Ghost.PID, sc.Ghost.NSPID)
		if nspid := status(t, sc.Ghost.PID, "NSpid"); nspid != want {
			t.Errorf("ghost's NSpid is %q, want %q", nspid, want)
		}
		if nspid := status(t, c.Init.PID, "NSpid"); nspid != fmt.Sprintf("%d 1", c.Init.PID) {
			t.Errorf("init's NSpid is %q", nspid)
		}
		host, _ := os.Readlink("/proc/self/ns/pid")
		if c.PIDNamespace == "" || c.PIDNamespace == host {
			t.Errorf("ghost's pid namespace %q, host's %q", c.PIDNamespace, host)
		}
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", sc.Ghost.PID))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(cg), ":"+c.CgroupPath+"\n") {
			t.Errorf("ghost's cgroups lack %s:\n%s", c.CgroupPath, cg)
		}
		if _, err := os.Stat("/dev/nvidia0"); err == nil {
			t.Log("this host has its own /dev/nvidia0; the ghost maps the container's")
		}
		checkDeviceOfMapping(t, sc.Ghost.PID, "/dev/nvidia0", loop)
		checkFDs(t, sc.Ghost.PID, "/dev/nvidia0")
	})
	if sc == nil || sc.Container == nil {
		return // skipped
	}
	if sc.Ghost.Alive() || sc.Container.Init.Alive() {
		t.Errorf("cleanup left ghost %d or init %d running", sc.Ghost.PID, sc.Container.Init.PID)
	}
	if _, err := os.Stat(sc.Container.CgroupDir); err == nil {
		t.Errorf("cleanup left cgroup %s", sc.Container.CgroupDir)
	}
}

func TestHoldDevZeroIsShmem(t *testing.T) {
	p := Hold(t, "/dev/zero")
	// What the capture must not take for a device mapping.
	WaitMapped(t, p.PID, "rw-s", "/dev/zero (deleted)")
	if len(fdsOn(t, p.PID, "/dev/zero")) != 2 {
		t.Errorf("pid %d should hold /dev/zero twice", p.PID)
	}
}

// fatalRecorder keeps the message of a Fatalf instead of ending the test.
type fatalRecorder struct {
	testing.TB
	fatal string
}

func (r *fatalRecorder) Fatalf(format string, args ...any) { r.fatal = fmt.Sprintf(format, args...) }

// TestHostLockTakenOncePerTest: a test, or a subtest of it, that takes a host
// lock it holds already goes on at once instead of waiting on itself, while
// any other open of the file is kept out. Asking for the exclusive lock while
// holding the shared one fails with a line rather than a hang.
func TestHostLockTakenOncePerTest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "host.lock")
	othersKeptOut := func(t *testing.T) {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != syscall.EWOULDBLOCK {
			t.Errorf("another open took the lock: %v", err)
		}
	}
	t.Run("exclusive", func(t *testing.T) {
		lockHost(t, path, syscall.LOCK_EX)
		lockHost(t, path, syscall.LOCK_EX)
		t.Run("sub", func(t *testing.T) {
			lockHost(t, path, syscall.LOCK_EX)
			othersKeptOut(t)
		})
		othersKeptOut(t)
	})
	t.Run("released", func(t *testing.T) {
		if _, held := heldBy(t.Name(), path); held {
			t.Error("still recorded as held after its test ended")
		}
		lockHost(t, path, syscall.LOCK_SH)
		r := &fatalRecorder{TB: t}
		lockHost(r, path, syscall.LOCK_EX)
		if !strings.Contains(r.fatal, "held shared by this test") {
			t.Errorf("shared then exclusive: %q", r.fatal)
		}
	})
}
