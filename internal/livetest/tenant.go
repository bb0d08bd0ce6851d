package livetest

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/internal/testwait"
)

// tenantSource is the C helper, since fork without exec is what makes a real
// ghost, and Go cannot fork without exec.
//
//go:embed helper/tenant.c
var tenantSource []byte

// Options choose the scenario StartGhost sets up.
type Options struct {
	// Container runs the tenant as a container would, in its own pid and
	// mount namespace (unshare -m -p --kill-child --mount-proc) with a tmpfs
	// on /dev holding a mknod'ed /dev/nvidia0 of the loop device, in a
	// cgroup named docker-<64 hex>.scope. The host then sees /dev/nvidia0 in
	// the ghost's maps although the host has no such path.
	Container bool
	// GhostComm, when set, is the name the ghost gives itself (prctl
	// PR_SET_NAME), as a miner calls itself python3. Its exe stays the helper.
	GhostComm string
	// Exe, when set, is the path the helper is built at, with its directory
	// made, for a workload named and placed as a user's
	// (~/.pyenv/.../python3.11) or a miner's. Cleanup removes the file. By
	// default it is in a temporary directory, under /tmp.
	Exe string
}

// Scenario is a tenant that mapped the loop device through a node named
// nvidia0 and left a ghost behind.
type Scenario struct {
	Loop *Loop
	// Path is the node's path as the host's /proc shows it in maps and fd
	// links, Loop.Node, or /dev/nvidia0 in a container.
	Path string
	// Tenant opened Path read-write and read-only, mapped 64 KiB of it
	// MAP_SHARED read-write, forked the ghost and exited. It is gone when
	// StartGhost returns.
	Tenant Proc
	// Ghost is the tenant's child, in a session of its own (setsid). It
	// inherited the rw-s mapping and both fds (access rw and r) by fork and
	// sleeps until killed. Its parent is now init, a subreaper, or the
	// container's init.
	Ghost Proc
	// Container is set with Options.Container.
	Container *Container
}

// Container describes the namespaces and cgroup of a containerised scenario.
type Container struct {
	ID           string // the 64 hex digits of docker-<ID>.scope
	CgroupDir    string // the directory in the cgroup filesystem
	CgroupPath   string // the path as /proc/PID/cgroup shows it, e.g. /docker-<ID>.scope
	Init         Proc   // the pid namespace's init (NSPID 1), the ghost's parent
	PIDNamespace string // link target of /proc/PID/ns/pid, e.g. pid:[4026532178]
}

// StartGhost builds the tenant helper, runs it on loop's device as opts say,
// and returns once the tenant has exited and its ghost holds the mapping.
// Cleanup kills the ghost (and the container's init) by PID.
func StartGhost(t testing.TB, loop *Loop, opts Options) *Scenario {
	t.Helper()
	bin := buildTenant(t)
	if opts.Exe != "" {
		bin = CopyExe(t, bin, opts.Exe)
	}
	sc := &Scenario{Loop: loop, Path: loop.Node}
	args := []string{"-g"}
	if opts.GhostComm != "" {
		args = append(args, "-n", opts.GhostComm)
	}
	if opts.Container {
		sc.Path = "/dev/nvidia0"
		sc.Container = startContainer(t, append([]string{bin}, args...), loop, sc)
	} else {
		procs, exited := runTenant(t, exec.Command(bin, append(args, loop.Node)...), "tenant", "ghost")
		sc.Tenant, sc.Ghost = procs["tenant"], procs["ghost"]
		t.Cleanup(func() {
			if err := sc.Ghost.kill(); err != nil {
				t.Errorf("livetest: ghost: %v", err)
			}
		})
		select {
		case <-exited:
		case <-time.After(waitLimit):
			t.Fatalf("livetest: tenant %d did not exit after forking its ghost", sc.Tenant.PID)
		}
	}
	// The tenant writes the PID file just before it exits, and a ghost is
	// only a ghost once it has (and has been re-parented).
	if err := testwait.For(waitLimit, fmt.Sprintf("tenant %d to exit", sc.Tenant.PID), func() bool { return !sc.Tenant.Alive() }); err != nil {
		t.Fatalf("livetest: %v", err)
	}
	WaitMapped(t, sc.Ghost.PID, "rw-s", sc.Path)
	return sc
}

// Hold starts a process that opens path read-write and read-only, maps 64
// KiB of it MAP_SHARED read-write, and sleeps until killed, as a tenant that
// did not fork. Cleanup kills it. Use it for files that must NOT count as
// devices (/dev/zero maps as "/dev/zero (deleted)", a /dev/shm file) as well
// as for device nodes.
func Hold(t testing.TB, path string) Proc {
	t.Helper()
	return hold(t, path)
}

// HoldMappings is Hold whose process also maps path count more times, 4 KiB
// read-only each, none merged with another, which makes count more lines in
// its maps, as a tenant that floods a capture with mappings of one device.
// The caller keeps count below vm.max_map_count.
func HoldMappings(t testing.TB, path string, count int) Proc {
	t.Helper()
	return hold(t, "-m", strconv.Itoa(count), path)
}

// HoldAt is Hold run from a copy of the helper at exe, whose directory it
// makes and whose file Cleanup removes. It is a process named and placed as
// a daemon's package installs it, an MPS server's nvidia-cuda-mps-server
// say. Its comm is exe's name cut to 15 bytes, as the kernel gives it at
// exec.
func HoldAt(t testing.TB, exe, path string) Proc {
	t.Helper()
	return holdBin(t, CopyExe(t, buildTenant(t), exe), path)
}

func hold(t testing.TB, args ...string) Proc {
	t.Helper()
	return holdBin(t, buildTenant(t), args...)
}

func holdBin(t testing.TB, bin string, args ...string) Proc {
	t.Helper()
	procs, exited := runTenant(t, exec.Command(bin, args...), "tenant")
	p := procs["tenant"]
	t.Cleanup(func() {
		if err := p.kill(); err != nil {
			t.Errorf("livetest: %v", err)
		}
		<-exited // reaped, as it is our child
	})
	return p
}

// TenantBinary builds the tenant helper and returns its path, for tests that
// run it themselves, such as a Slurm job's script (see helper/tenant.c for
// its arguments).
func TenantBinary(t testing.TB) string { return buildTenant(t) }

// HoldLeaderExited is Hold whose main thread then exits while three other
// threads keep the mapping and the fds. /proc/PID is a zombie leader with no
// maps, fds or exe, and only /proc/PID/task/TID of a live thread shows them.
// Cleanup kills the whole process by PID.
func HoldLeaderExited(t testing.TB, path string) Proc {
	t.Helper()
	bin := buildTenant(t)
	procs, exited := runTenant(t, exec.Command(bin, "-t", path), "tenant")
	p := procs["tenant"]
	killOnCleanup(t, p, exited)
	waitLeaderExited(t, p)
	return p
}

// killOnCleanup kills p by PID when the test ends, while it is still the
// same process (Alive says no to a zombie leader whose threads run), and
// reaps it, as it is our child.
func killOnCleanup(t testing.TB, p Proc, exited <-chan error) {
	t.Cleanup(func() {
		if st, _, err := readStat(p.PID); err == nil && st == p.StartTime {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
		<-exited
	})
}

// waitLeaderExited waits until p's main thread has exited (a zombie leader).
func waitLeaderExited(t testing.TB, p Proc) {
	t.Helper()
	err := testwait.For(waitLimit, fmt.Sprintf("pid %d's leader to exit", p.PID), func() bool {
		_, state, err := readStat(p.PID)
		return err == nil && state == 'Z'
	})
	if err != nil {
		t.Fatalf("livetest: %v", err)
	}
}

// CopyExe copies the helper bin to path (mode 0755, directories made) and
// returns path. Cleanup removes the file.
func CopyExe(t testing.TB, bin, path string) string {
	t.Helper()
	data, err := os.ReadFile(bin)
	if err == nil {
		err = os.MkdirAll(filepath.Dir(path), 0o755)
	}
	if err == nil {
		err = os.WriteFile(path, data, 0o755)
	}
	if err != nil {
		t.Fatalf("livetest: %v", err)
	}
	t.Cleanup(func() { os.Remove(path) })
	return path
}

// buildTenant compiles tenant.c with gcc into a temporary directory.
func buildTenant(t testing.TB) string {
	t.Helper()
	return buildC(t, "tenant", tenantSource, "-pthread")
}

// buildC compiles one embedded C source with gcc into a temporary directory
// and returns the binary's path.
func buildC(t testing.TB, name string, source []byte, flags ...string) string {
	t.Helper()
	Require(t, "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, name+".c")
	if err := os.WriteFile(src, source, 0o600); err != nil {
		t.Fatalf("livetest: %v", err)
	}
	bin := filepath.Join(dir, name)
	args := append(append([]string{"-O", "-Wall"}, flags...), "-o", bin, src)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("livetest: gcc %s.c: %v\n%s", name, err, out)
	}
	// Each build is a binary of its own. Its directory, appended past the
	// ELF image, keeps a concurrent test's helper (another package's) from
	// sharing its sha256 and so passing for this test's process come back.
	f, err := os.OpenFile(bin, os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = f.WriteString("\x00" + dir)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatalf("livetest: %v", err)
	}
	return bin
}

// runTenant starts cmd with a PID file as its last argument and waits until
// the file names every role in roles. The channel yields cmd's exit, once.
func runTenant(t testing.TB, cmd *exec.Cmd, roles ...string) (map[string]Proc, <-chan error) {
	t.Helper()
	dir := t.TempDir()
	pidfile := filepath.Join(dir, "pids")
	cmd.Args = append(cmd.Args, pidfile)
	// The tenant's stderr is an *os.File, not a buffer, since the ghost
	// inherits it, and a pipe would make Wait wait for the ghost too.
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatalf("livetest: %v", err)
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("livetest: start %s: %v", cmd.Path, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fail := func(why string) {
		msg, _ := os.ReadFile(stderr.Name())
		t.Fatalf("livetest: %s %s: %s", strings.Join(cmd.Args, " "), why, msg)
	}
	deadline := time.After(waitLimit)
	for {
		if b, err := os.ReadFile(pidfile); err == nil {
			procs, err := parsePIDs(string(b), roles)
			if err != nil {
				fail(err.Error())
			}
			return procs, exited
		}
		select {
		case err := <-exited:
			if _, serr := os.Stat(pidfile); serr != nil {
				fail(fmt.Sprintf("exited before it was ready (%v)", err))
			}
			// It wrote the file and exited, as the ghost's parent does, so the exit is passed on.
			exited <- err
		case <-deadline:
			fail(fmt.Sprintf("not ready after %s", waitLimit))
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// parsePIDs reads the helper's PID file, one "ROLE HOSTPID NSPID STARTTIME" a line.
func parsePIDs(text string, roles []string) (map[string]Proc, error) {
	procs := map[string]Proc{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			return nil, fmt.Errorf("bad PID file line %q", line)
		}
		pid, err1 := strconv.Atoi(f[1])
		nspid, err2 := strconv.Atoi(f[2])
		st, err3 := strconv.ParseUint(f[3], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("bad PID file line %q", line)
		}
		procs[f[0]] = Proc{PID: pid, NSPID: nspid, StartTime: st}
	}
	for _, r := range roles {
		if _, ok := procs[r]; !ok {
			return nil, fmt.Errorf("PID file lacks %q: %q", r, text)
		}
	}
	return procs, nil
}

//go:embed helper/privfd.c
var privfdSource []byte

// HoldInThreadTable starts a process whose only fd on path lives in a
// thread's own fd table (cloned without CLONE_FILES), where /proc/PID/fd,
// fuser and lsof show none. It returns the process and that thread (its TID
// as PID).
// With leaderExits the main thread then exits, another thread sharing its
// table living on. Cleanup kills the process by PID.
func HoldInThreadTable(t testing.TB, path string, leaderExits bool) (process, thread Proc) {
	t.Helper()
	cmd := exec.Command(buildC(t, "privfd", privfdSource), path)
	if leaderExits {
		cmd = exec.Command(cmd.Path, "-x", path)
	}
	procs, exited := runTenant(t, cmd, "tenant", "thread")
	p := procs["tenant"]
	killOnCleanup(t, p, exited)
	if leaderExits {
		waitLeaderExited(t, p)
	}
	return p, procs["thread"]
}
