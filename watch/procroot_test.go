package watch

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/nvmlread"
)

// statLine is a /proc/PID/stat line with start time start (field 22).
func statLine(pid, comm string, start string) string {
	return pid + " (" + comm + ") S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 " + start + " 0 0\n"
}

// hostileTree is a --proc-root tree a tenant could hand over: process
// directories whose files are links out of the tree, a FIFO, /dev/zero, a
// non-canonical PID, and one honest process.
func hostileTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "stat")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(outside, []byte(statLine("4242", "x", "7")), 0o600))
	must(os.WriteFile(filepath.Join(root, "stat"), []byte("btime 1764000000\n"), 0o600))
	for _, pid := range []string{"4242", "4243", "4244", "4245", "04246"} {
		must(os.Mkdir(filepath.Join(root, pid), 0o755))
		must(os.Symlink("/usr/bin/worker", filepath.Join(root, pid, "exe")))
	}
	must(os.Symlink(outside, filepath.Join(root, "4242", "stat")))     // a link out of the tree
	must(syscall.Mkfifo(filepath.Join(root, "4243", "stat"), 0o600))   // a FIFO: no writer ever comes
	must(os.Symlink("/dev/zero", filepath.Join(root, "4244", "stat"))) // endless
	must(os.WriteFile(filepath.Join(root, "4245", "stat"), []byte(statLine("4245", "ok", "7")), 0o600))
	must(os.WriteFile(filepath.Join(root, "04246", "stat"), []byte(statLine("4246", "alias", "7")), 0o600))
	must(os.Symlink("/proc/1", filepath.Join(root, "4247"))) // a whole process directory linked away
	return root
}

// within runs f and fails the test if it does not return within d: a FIFO
// read without O_NONBLOCK would wait forever, /dev/zero read to the end
// would run out of memory.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %s", what, d)
	}
}

// TestIdentityReadsBeneathTheTree: watch's identities read a process's exe
// and start time through the capture's reader: a stat that links out of the
// tree, a FIFO or /dev/zero is not read; an honest one is.
func TestIdentityReadsBeneathTheTree(t *testing.T) {
	proc, err := capture.OpenProcRoot(hostileTree(t))
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Close()
	ids := newIdentities(proc)
	for _, pid := range []int{4242, 4243, 4244, 4247} {
		within(t, 5*time.Second, "reading a hostile stat", func() {
			p := &eventlog.Process{PID: pid, StartTime: 7}
			ids.fill(p, "")
			if p.Exe != "" {
				t.Errorf("pid %d: exe %q taken from a stat that is not the tree's regular file", pid, p.Exe)
			}
		})
	}
	p := &eventlog.Process{PID: 4245, StartTime: 7}
	ids.fill(p, "")
	if p.Exe != "/usr/bin/worker" {
		t.Errorf("the honest process: exe %q", p.Exe)
	}
	if p := (&eventlog.Process{PID: 4245, StartTime: 8}); func() bool { ids.fill(p, ""); return p.Exe != "" }() {
		t.Errorf("a PID with another start time was taken for the process: %q", p.Exe)
	}
	pids, err := proc.PIDs()
	slices.Sort(pids)
	if err != nil || !slices.Equal(pids, []int{4242, 4243, 4244, 4245, 4247}) {
		t.Errorf("PIDs of the tree: %v, %v (04246 is no PID)", pids, err)
	}
}

// TestWatchHostileDevices: a tree whose devices file is a FIFO or a link to
// /dev/zero: watch starts (it does not wait for a writer, nor read without
// end), says that the file was not read, rescans and stops.
func TestWatchHostileDevices(t *testing.T) {
	for _, kind := range []string{"fifo", "zero"} {
		t.Run(kind, func(t *testing.T) {
			root := hostileTree(t)
			devices := filepath.Join(root, "devices")
			if kind == "fifo" {
				if err := syscall.Mkfifo(devices, 0o600); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Symlink("/dev/zero", devices); err != nil {
				t.Fatal(err)
			}
			var log syncLog
			ctx, cancel := context.WithCancel(context.Background())
			started := make(chan struct{})
			var err error
			within(t, 20*time.Second, "watch on a hostile tree", func() {
				go func() { <-started; time.Sleep(300 * time.Millisecond); cancel() }() // workload: six rescans of the hostile tree
				_, err = Run(ctx, Options{DB: filepath.Join(t.TempDir(), "gpusnap.db"), ProcRoot: root, Mode: ModeFallback,
					Interval: 50 * time.Millisecond, NVML: nvmlread.Options{Disabled: true}, Log: &log,
					Started: func(eventlog.Event) { close(started) }})
			})
			cancel()
			if err != nil {
				t.Fatalf("watch: %v\n%s", err, log.String())
			}
			if !strings.Contains(log.String(), "devices") || !strings.Contains(log.String(), "only major 195 counts as NVIDIA") {
				t.Errorf("watch did not say its devices file was not read:\n%s", log.String())
			}
		})
	}
}
