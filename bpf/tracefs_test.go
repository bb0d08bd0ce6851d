package bpf

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/internal/testenv"
)

// TestTracefsLeftAsFound: on a host where tracefs is not mounted, the
// tracepoint hook still attaches after a kprobe attempt, as production tries
// them, and sees opens and mappings, and the host's mounts are as they were:
// no tracefs while it runs nor after. The
// host here is a mount namespace of the test's own (unshare -m) with
// tracefs unmounted in it; the real host's mounts are never touched.
func TestTracefsLeftAsFound(t *testing.T) {
	if os.Getenv("GPUSNAP_TRACEFS_HELPER") == "1" {
		tracefsHelper(t)
		return
	}
	testenv.Root(t, "loads the watch programs")
	// The helper runs in a mount namespace of its own, made by the Go
	// runtime (which makes its mounts private): the kernel matrix's guests
	// have no unshare(1).
	cmd := exec.Command(os.Args[0], "-test.run=^TestTracefsLeftAsFound$", "-test.v")
	cmd.Env = append(os.Environ(), "GPUSNAP_TRACEFS_HELPER=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	switch {
	case strings.Contains(string(out), "--- SKIP"):
		t.Skipf("helper skipped:\n%s", out)
	case err != nil || !strings.Contains(string(out), "--- PASS"):
		t.Fatalf("helper in its own mount namespace: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// tracefsHelper runs in a mount namespace of its own: it unmounts tracefs
// there, opens the tracepoint hook, and checks the namespace's mounts.
func tracefsHelper(t *testing.T) {
	for tracefsMounted(t) {
		if err := unix.Unmount(TracefsDir, unix.MNT_DETACH); err != nil {
			t.Fatalf("unmount %s in the test's namespace: %v", TracefsDir, err)
		}
	}
	w := openTracing(t, HookKprobe, HookTracepoint)
	if w.Hook == HookKprobe {
		// This kernel takes kprobes: the tracepoints after them, alone.
		w.Close()
		w = openTracing(t, HookTracepoint)
	}
	if tracefsMounted(t) {
		t.Error("tracefs is mounted after the tracepoint hook attached: watch changed the host's mounts")
	}
	checkOpenMap(t, w)
	w.Close()
	if tracefsMounted(t) {
		t.Error("tracefs is mounted after watch closed")
	}
}

// openTracing opens the first of hooks the kernel takes; it fails where
// one was refused for want of tracefs.
func openTracing(t *testing.T, hooks ...Hook) *Watch {
	t.Helper()
	w, err := Open([]uint32{195}, hooks)
	switch {
	case err != nil && strings.Contains(err.Error(), "tracefs"):
		t.Fatalf("the tracepoint hook did not find tracefs: %v", err)
	case err != nil:
		t.Skipf("BPF test: the kernel refuses the watch programs here: %v", err)
	}
	t.Logf("hook %s; refused: %v", w.Hook, w.Refused)
	return w
}

// tracefsMounted says whether this thread's mount namespace (every thread's
// but the one withTracefs used) has tracefs at TracefsDir.
func tracefsMounted(t *testing.T) bool {
	data, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == TracefsDir {
			return true
		}
	}
	return false
}
