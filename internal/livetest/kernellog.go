package livetest

import (
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// kernelLogLock is one file for every package's tests, since go test runs
// packages side by side, and the host has one kernel log.
const kernelLogLock = "/tmp/gpusnap-test-kernel-log.lock"

// ShareKernelLog is for a test that diffs the live host and judges the
// verdict. A record another test forges into /dev/kmsg during its window
// would rightly be reported as forged_kernel_message. It holds the lock
// shared until the test ends, so such tests run side by side but never
// beside a forger.
func ShareKernelLog(t testing.TB) { lockKernelLog(t, syscall.LOCK_SH) }

// OwnKernelLog is for the one test that writes to /dev/kmsg. It waits until
// no live diff of another package is running and keeps them out until it
// ends.
func OwnKernelLog(t testing.TB) { lockKernelLog(t, syscall.LOCK_EX) }

func lockKernelLog(t testing.TB, how int) { lockHost(t, kernelLogLock, how) }

// deviceNoiseLock is one file for every package's tests, since a watch
// records every process on the host that uses an NVIDIA-named node.
const deviceNoiseLock = "/tmp/gpusnap-test-device-noise.lock"

// ShareQuietHost is for a test whose watch must lose no event, or whose
// verdict must not meet another test's short-lived device users or hidden
// processes. It runs beside other such tests, never beside one that floods
// the host with device users (a PID hopper's forks, an open flood) or hides
// a process under a mount over /proc/PID. The floods fill a watch's ring
// buffer, and a process that exits while it is read fails its allow entry
// closed. A hidden process is rightly a high finding of any whole-host
// verdict, a gate's refusal.
func ShareQuietHost(t testing.TB) { lockHost(t, deviceNoiseLock, syscall.LOCK_SH) }

// OwnNoisyHost is for a test that floods the host with device users or
// hides a process. It waits until no quiet test runs and keeps them out
// until it ends.
func OwnNoisyHost(t testing.TB) { lockHost(t, deviceNoiseLock, syscall.LOCK_EX) }

// heldLocks names, for each lock file, the tests of this process that hold
// it and how. A test (or a subtest of one) that holds a lock already has it
// again for free, since a second flock of the same file from this process
// would wait on the first forever.
var heldLocks = struct {
	sync.Mutex
	by map[string]map[string]int // path -> test name -> how
}{by: map[string]map[string]int{}}

// lockHost holds the flock how on path until the test ends. A test that
// takes several host locks takes them in one order, the kernel log's, the
// quiet host's, then the fake GPUs', so that no two tests, each holding one,
// wait on each other's.
func lockHost(t testing.TB, path string, how int) {
	t.Helper()
	if held, ok := heldBy(t.Name(), path); ok {
		if held == syscall.LOCK_SH && how == syscall.LOCK_EX {
			t.Fatalf("test lock %s: held shared by this test, wanted exclusive: take the exclusive one first", path)
		}
		return
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatalf("test lock %s: %v", path, err)
	}
	// The lock is taken blocking, as the longest holder is a whole Slurm
	// run, bounded by its own time limits and by go test's -timeout.
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		t.Fatalf("test lock %s: %v", path, err)
	}
	name := t.Name()
	heldLocks.Lock()
	if heldLocks.by[path] == nil {
		heldLocks.by[path] = map[string]int{}
	}
	heldLocks.by[path][name] = how
	heldLocks.Unlock()
	t.Cleanup(func() {
		heldLocks.Lock()
		delete(heldLocks.by[path], name)
		heldLocks.Unlock()
		f.Close()
	})
}

// heldBy reports how the test named name, or a test it runs under, holds
// path.
func heldBy(name, path string) (how int, ok bool) {
	heldLocks.Lock()
	defer heldLocks.Unlock()
	for holder, h := range heldLocks.by[path] {
		if name == holder || strings.HasPrefix(name, holder+"/") {
			return h, true
		}
	}
	return 0, false
}

// fakeGPULock is one file for every gpusnap test run on the host, since a
// test that checks a fake GPU outside /tmp sees every node named for that
// GPU.
const fakeGPULock = "/tmp/gpusnap-test-fake-gpus.lock"

// OwnFakeGPUs is for a test that makes fake GPUs outside /tmp (where other
// tests' allow lists do not reach) and checks them. Another run of the same
// test, in a second test run beside this one, makes nodes of the same names,
// which it would rightly find in use. They take turns.
func OwnFakeGPUs(t testing.TB) { lockHost(t, fakeGPULock, syscall.LOCK_EX) }
