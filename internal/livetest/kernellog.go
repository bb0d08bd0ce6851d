package livetest

import (
	"os"
	"syscall"
	"testing"
)

// kernelLogLock is one file for every package's tests: go test runs packages
// side by side, and the host has one kernel log.
const kernelLogLock = "/tmp/gpusnap-test-kernel-log.lock"

// ShareKernelLog is for a test that diffs the live host and judges the
// verdict: a record another test forges into /dev/kmsg during its window would
// rightly be reported as forged_kernel_message. It holds the lock shared until
// the test ends, so such tests run side by side but never beside a forger.
func ShareKernelLog(t testing.TB) { lockKernelLog(t, syscall.LOCK_SH) }

// OwnKernelLog is for the one test that writes to /dev/kmsg: it waits until no
// live diff of another package is running and keeps them out until it ends.
func OwnKernelLog(t testing.TB) { lockKernelLog(t, syscall.LOCK_EX) }

func lockKernelLog(t testing.TB, how int) {
	t.Helper()
	f, err := os.OpenFile(kernelLogLock, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatalf("kernel-log test lock: %v", err)
	}
	// Blocking: the longest holder is a whole Slurm run, bounded by its own
	// time limits and by go test's -timeout.
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		t.Fatalf("kernel-log test lock: %v", err)
	}
	t.Cleanup(func() { f.Close() })
}
