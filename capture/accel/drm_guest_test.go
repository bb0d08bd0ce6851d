package accel_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/capture/accel"
	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/testwait"
	"github.com/gpusnap/gpusnap/snapshot"
)

// TestDRMGuest runs against a real DRM driver, vgem: in the kernel
// matrix's DRM guest (scripts/kernel-matrix.sh, KERNEL_MATRIX_DRM), or on
// a host where root loaded vgem. A ghost (drmuser.c) opens the card and
// render nodes, maps a buffer through the render node and outlives its
// parent; a holder keeps the render node alone. Capture, diff and check
// must name both, by the device numbers and fdinfo the kernel gives, and
// nothing once they are killed. vgem gives no memory or engine time, so
// both are holders of an idle node: low, as a compositor is.
func TestDRMGuest(t *testing.T) {
	dev := vgemDevice(t)
	card, render := nodeOf(dev, snapshot.NodeCard), nodeOf(dev, snapshot.NodeRender)
	if card == nil || render == nil {
		t.Fatalf("vgem device without a card and a render node: %+v", dev)
	}
	bin := drmuserBin(t)
	ctx := context.Background()
	snap := func() *snapshot.Snapshot {
		t.Helper()
		s, err := capture.Capture(ctx, capture.Options{Path: capture.PathProc})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	from := snap()
	ghost := startUser(t, bin, "ghost", card.Path, render.Path)
	holder := startUser(t, bin, "hold", render.Path)
	to := snap()

	g := findProcess(t, to, ghost)
	if !slices.ContainsFunc(g.Mappings, func(m snapshot.Mapping) bool {
		return m.Path == render.Path && m.DeviceNumber == render.DeviceNumber && m.Perms == "rw-s"
	}) {
		t.Errorf("ghost %d: no rw-s mapping of %s (%s): %+v", ghost, render.Path, render.DeviceNumber, g.Mappings)
	}
	for _, n := range []*snapshot.AccelNode{card, render} {
		if !slices.ContainsFunc(g.Holders, func(h snapshot.Holder) bool { return h.DeviceNumber == n.DeviceNumber && h.Access == "rw" }) {
			t.Errorf("ghost %d: no rw holder of %s (%s): %+v", ghost, n.Path, n.DeviceNumber, g.Holders)
		}
	}
	fdinfo := renderFdinfo(t, ghost, render.Path)
	_, drmKeys := accel.ParseFdinfo([]byte(fdinfo))
	if drmKeys != (len(g.DRMClients) > 0) {
		t.Errorf("fdinfo with drm keys %v, DRM clients %+v:\n%s", drmKeys, g.DRMClients, fdinfo)
	}

	r := diff.Compare(from, to, diff.Options{ZombieThreshold: diff.DefaultZombieThreshold})
	want := []string{
		fmt.Sprintf("leftover_device_holder low %d %s", ghost, render.Path),
		fmt.Sprintf("other_device_mapping low %d %s", ghost, render.Path),
		fmt.Sprintf("leftover_device_holder low %d %s", holder, render.Path),
	}
	if got := findingsOf(r, ghost, holder); !sameSet(got, want) {
		t.Errorf("diff:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	c := diff.Check(to, diff.CheckOptions{ZombieThreshold: diff.DefaultZombieThreshold, FailOn: diff.AtLeast(diff.Medium)})
	want = []string{fmt.Sprintf("gpu_in_use low %d %s", ghost, render.Path), fmt.Sprintf("gpu_in_use low %d %s", holder, render.Path)}
	if got := findingsOf(c, ghost, holder); !sameSet(got, want) {
		t.Errorf("check:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}

	for _, pid := range []int{ghost, holder} {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	waitGone(t, ghost, holder)
	if got := findingsOf(diff.Compare(from, snap(), diff.Options{ZombieThreshold: diff.DefaultZombieThreshold}), ghost, holder); len(got) > 0 {
		t.Errorf("after both were killed: %q", got)
	}
	keys := "no drm- keys"
	if drmKeys {
		keys = "drm- keys"
	}
	t.Logf("matrix: drm: vgem %s and %s; ghost and holder named (%d findings), fdinfo with %s", card.DeviceNumber, render.DeviceNumber, len(r.Findings), keys)
}

// vgemDevice is the vgem device sysfs shows, or the test skips: it needs
// the module loaded, which the DRM guest does and a host rarely has.
func vgemDevice(t *testing.T) *snapshot.Accelerator {
	a, err := accel.Read("/sys")
	if err != nil {
		t.Fatal(err)
	}
	if a != nil {
		for i := range a.Devices {
			if a.Devices[i].Vendor == "vgem" {
				return &a.Devices[i]
			}
		}
	}
	if os.Getenv("GPUSNAP_KERNEL_MATRIX") != "" {
		t.Fatalf("no vgem device in the DRM guest: %+v", a)
	}
	t.Skip("no vgem device: run scripts/kernel-matrix.sh with KERNEL_MATRIX_DRM=1, or modprobe vgem as root")
	return nil
}

func nodeOf(d *snapshot.Accelerator, kind string) *snapshot.AccelNode {
	for i := range d.Nodes {
		if d.Nodes[i].Kind == kind {
			return &d.Nodes[i]
		}
	}
	return nil
}

// drmuserBin is $GPUSNAP_DRMUSER_BIN (the guest's), else drmuser.c built
// with gcc.
func drmuserBin(t *testing.T) string {
	if bin := os.Getenv("GPUSNAP_DRMUSER_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "drmuser")
	out, err := exec.Command("gcc", "-O", "-Wall", "-o", bin, "../../internal/livetest/helper/drmuser.c").CombinedOutput()
	if err != nil {
		t.Fatalf("gcc drmuser.c: %v: %s", err, out)
	}
	return bin
}

// startUser runs drmuser and returns the PID it says keeps the node; the
// test kills it at the end by that PID.
func startUser(t *testing.T, bin string, args ...string) int {
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("drmuser %s: %q %v", args[0], line, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if args[0] == "ghost" {
		if err := cmd.Wait(); err != nil { // the parent leaves its ghost
			t.Fatalf("drmuser ghost: %v", err)
		}
	} else {
		t.Cleanup(func() { _ = cmd.Wait() })
	}
	return pid
}

func findProcess(t *testing.T, s *snapshot.Snapshot, pid int) *snapshot.Process {
	for i := range s.Processes {
		if s.Processes[i].PID == pid {
			return &s.Processes[i]
		}
	}
	t.Fatalf("pid %d not captured", pid)
	return nil
}

// renderFdinfo is the fdinfo the kernel wrote for pid's render node fd.
func renderFdinfo(t *testing.T, pid int, render string) string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if target, _ := os.Readlink(filepath.Join(dir, fd.Name())); target == render {
			data, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()))
			if err != nil {
				t.Fatal(err)
			}
			return string(data)
		}
	}
	t.Fatalf("pid %d holds no %s", pid, render)
	return ""
}

// findingsOf are r's findings about the PIDs, as "kind severity pid device".
func findingsOf(r *diff.Result, pids ...int) []string {
	var out []string
	for _, f := range r.Findings {
		if f.Process != nil && slices.Contains(pids, f.Process.PID) {
			out = append(out, fmt.Sprintf("%s %s %d %s", f.Kind, f.Severity, f.Process.PID, f.Device))
		}
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// waitGone waits until the PIDs are gone or zombies: the guest's init
// reaps no orphan, and a zombie keeps no descriptor or mapping.
func waitGone(t *testing.T, pids ...int) {
	for _, pid := range pids {
		testwait.Until(t, 10*time.Second, fmt.Sprintf("pid %d to end after SIGKILL", pid), func() bool {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			return err != nil || strings.Contains(string(stat), ") Z ")
		})
	}
}
