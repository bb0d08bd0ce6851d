// Package testwait is how gpusnap's tests wait for something to happen (a
// watcher attached, a process started, a file written). They poll the
// condition itself, so a loaded host only makes them slower and an idle one
// does not pay for a fixed sleep.
package testwait

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// maxStep bounds the backoff between two polls. It is short enough that a test
// goes on soon after the condition holds, long enough that a costly
// condition (reading an event log) does not load the host.
const maxStep = 50 * time.Millisecond

// For polls cond, 1 ms after the first try and backing off to maxStep, until
// it holds or timeout passes. Then it returns an error naming what it waited
// for. cond is always tried once more at the deadline.
func For(timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for step := time.Millisecond; !cond(); step = min(2*step, maxStep) {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(min(step, left))
	}
	return nil
}

// Until is For that fails the test at once on timeout, for a test that
// cannot go on without the condition.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := For(timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}

// ClockPast waits until the kernel's file clock has moved past path's
// ctime, so that a change to path after it returns gives path a later ctime
// and mtime. The clock is coarse (a tick, up to 10 ms), and a test of a
// cache keyed on those times must not rely on a lucky tick.
func ClockPast(t testing.TB, path string) {
	t.Helper()
	var target syscall.Stat_t
	if err := syscall.Stat(path, &target); err != nil {
		t.Fatal(err)
	}
	// The probe is in a directory of its own, since one beside path would
	// change the times of path's directory.
	probe := filepath.Join(t.TempDir(), "clock")
	Until(t, 5*time.Second, "the file clock to pass the ctime of "+path, func() bool {
		var st syscall.Stat_t
		if os.WriteFile(probe, nil, 0o600) != nil || syscall.Stat(probe, &st) != nil {
			return false
		}
		return st.Ctim.Nano() > target.Ctim.Nano()
	})
}
