package testwait

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// For returns as soon as the condition holds, having polled it again after
// each backoff, not after a fixed delay.
func TestForReturnsWhenTheConditionHolds(t *testing.T) {
	var tries atomic.Int32
	began := time.Now()
	if err := For(10*time.Second, "the fifth try", func() bool { return tries.Add(1) == 5 }); err != nil {
		t.Fatal(err)
	}
	// Four backoffs of 1, 2, 4 and 8 ms: far below a second even on a loaded host.
	if took := time.Since(began); tries.Load() != 5 || took > time.Second {
		t.Errorf("%d tries in %s, want 5 in about 15ms", tries.Load(), took)
	}
}

// On timeout For names what it waited for, tries the condition at the
// deadline, and returns soon after it.
func TestForTimesOutNamingWhat(t *testing.T) {
	var tries atomic.Int32
	began := time.Now()
	err := For(300*time.Millisecond, "a condition that never holds", func() bool { tries.Add(1); return false })
	took := time.Since(began)
	if err == nil || !strings.Contains(err.Error(), "waiting for a condition that never holds") || !strings.Contains(err.Error(), "300ms") {
		t.Errorf("error %v, want it to name the condition and the timeout", err)
	}
	if took < 300*time.Millisecond || took > 300*time.Millisecond+5*maxStep+time.Second {
		t.Errorf("timed out after %s, want about 300ms", took)
	}
	// 1+2+4+8+16+32 ms, then steps of maxStep: at least 8 tries in 300 ms.
	if n := tries.Load(); n < 8 {
		t.Errorf("%d tries in 300ms, want the backoff to keep polling", n)
	}
}

// After ClockPast, a file changed gets a ctime later than the one path had.
func TestClockPastMovesCtime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	for range 20 {
		if err := os.WriteFile(path, []byte("a"), 0o600); err != nil {
			t.Fatal(err)
		}
		var before, after syscall.Stat_t
		if err := syscall.Stat(path, &before); err != nil {
			t.Fatal(err)
		}
		ClockPast(t, path)
		if err := os.Chmod(path, 0o640); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Stat(path, &after); err != nil {
			t.Fatal(err)
		}
		if after.Ctim.Nano() <= before.Ctim.Nano() {
			t.Fatalf("ctime %d after ClockPast and a chmod, want past %d", after.Ctim.Nano(), before.Ctim.Nano())
		}
	}
}

// fatalRecorder is a testing.TB whose Fatal records its message and ends the
// goroutine, as the testing package's does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatal(args ...any) {
	r.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

// Until fails the test with For's error on timeout, and not otherwise.
func TestUntilFailsTheTestOnTimeout(t *testing.T) {
	for _, tc := range []struct {
		holds bool
		want  string
	}{{true, ""}, {false, "timed out after 20ms waiting for the flag"}} {
		r := &fatalRecorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Until(r, 20*time.Millisecond, "the flag", func() bool { return tc.holds })
		}()
		<-done
		if r.msg != tc.want {
			t.Errorf("condition holding %v: Fatal said %q, want %q", tc.holds, r.msg, tc.want)
		}
	}
}
