package capture_test

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/internal/livetest"
)

// The gate's capture reads who a process is only where it uses a device:
// a worker mapping a node named nvidia0 is read whole, and so is its parent
// (this test), whose exe the worker's ancestry names, while a sleep that
// holds nothing but its terminal and null is read for stat, maps and fds.
func TestLiveGPUIdentityOnly(t *testing.T) {
	loop := livetest.NewLoop(t)
	w := livetest.StartWorker(t, loop.Node, livetest.WorkerOptions{})
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleep.Process.Kill(); _ = sleep.Wait() })

	snap, err := capture.Capture(context.Background(), capture.Options{Path: capture.PathProc, GPUIdentityOnly: true})
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	worker := mustFind(t, snap, w.Proc, "worker")
	if !worker.UsesNVIDIA() || worker.Exe == "" || len(worker.Cmdline) == 0 || worker.User == "" || len(worker.Cgroups) == 0 || worker.Raw == nil {
		t.Errorf("the worker uses a GPU and must be read whole: exe %q cmdline %q user %q cgroups %q raw %v",
			worker.Exe, worker.Cmdline, worker.User, worker.Cgroups, worker.Raw != nil)
	}
	self, _ := os.Executable()
	if len(worker.Ancestry) == 0 || worker.Ancestry[0].PID != os.Getpid() || worker.Ancestry[0].Exe != self {
		t.Errorf("the worker's ancestry %+v must start with this test %d, exe %s", worker.Ancestry, os.Getpid(), self)
	}
	parent := capture.FindPID(t, snap, os.Getpid())
	if parent.Exe != self || len(parent.Cmdline) == 0 {
		t.Errorf("the worker's parent (this test) must be read whole: exe %q cmdline %q", parent.Exe, parent.Cmdline)
	}

	s := capture.FindPID(t, snap, sleep.Process.Pid)
	if s.Comm != "sleep" || s.StartTime == 0 || s.PPID != os.Getpid() {
		t.Errorf("the sleep's stat: comm %q start %d ppid %d", s.Comm, s.StartTime, s.PPID)
	}
	if s.Exe != "" || s.Cmdline != nil || s.Cgroups != nil {
		t.Errorf("the sleep uses no device: who it is is not read, yet exe %q cmdline %q cgroups %q", s.Exe, s.Cmdline, s.Cgroups)
	}
	if len(s.Mappings) != 0 || len(s.Unreadable) != 0 {
		t.Errorf("the sleep maps no device and was read: mappings %+v unreadable %q", s.Mappings, s.Unreadable)
	}
}
