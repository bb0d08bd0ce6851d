package capture

import (
	"context"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

// plainDevice knows the memory devices and terminals every process holds,
// and nothing else: an unknown number is never plain.
func TestPlainDevice(t *testing.T) {
	dev := func(major, minor uint32) snapshot.DeviceNumber {
		return snapshot.DeviceNumber{Major: major, Minor: minor}
	}
	// null, pts 2, ptmx; then nvidia0, a render node, a loop device, unknown
	plain := []snapshot.DeviceNumber{dev(1, 3), dev(136, 2), dev(5, 2)}
	other := []snapshot.DeviceNumber{dev(195, 0), dev(226, 128), dev(7, 0), {}}
	for _, n := range plain {
		if !plainDevice(n) {
			t.Errorf("%s is a memory device or a terminal: plain", n)
		}
	}
	for _, n := range other {
		if plainDevice(n) {
			t.Errorf("%s is not plain", n)
		}
	}
}

// A process whose maps the gate's capture could not read is read whole, so
// that what was not seen is said of a process whose identity is known.
func TestGlanceReadsAnUnreadableProcessWhole(t *testing.T) {
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleep.Process.Kill(); _ = sleep.Wait() })
	pid := sleep.Process.Pid
	maps := "/proc/" + strconv.Itoa(pid) + "/maps"
	faults := func(path string) error {
		if path == maps {
			return syscall.EACCES
		}
		return nil
	}
	snap, err := capture(context.Background(), Options{Path: PathProc, GPUIdentityOnly: true}, faults)
	if err != nil {
		t.Fatalf("capture: %v", err)
	}
	p := findPID(t, snap, pid)
	if !slices.Equal(p.Unreadable, []string{"maps"}) || p.Exe == "" || !slices.Equal(p.Cmdline, []string{"sleep", "60"}) {
		t.Errorf("unreadable %q exe %q cmdline %q: want maps unreadable and the process read whole", p.Unreadable, p.Exe, p.Cmdline)
	}
	if snap.Scan.Unreadable == 0 {
		t.Errorf("scan counts no unreadable process")
	}
}
