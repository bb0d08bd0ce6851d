package livetest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// PodCgroup makes a pod's cgroup where the kubelet's systemd driver puts
// it (kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid
// with underscores>.slice) and returns a function that moves a process into
// it. Cleanup removes it, and its parents where no other test's pod is in
// them, once its processes are gone, so call it before starting them.
func PodCgroup(t testing.TB, podUID string) (join func(pid int)) {
	t.Helper()
	mnt, _, err := cgroupMount()
	if err != nil {
		t.Skipf("live /proc test: no cgroup hierarchy to place a process in: %v", err)
	}
	parents := []string{"kubepods.slice", "kubepods.slice/kubepods-besteffort.slice"}
	for _, p := range parents {
		if err := os.Mkdir(filepath.Join(mnt, p), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			t.Skipf("live /proc test: cannot create a cgroup here: %v", err)
		}
	}
	t.Cleanup(func() {
		for i := len(parents) - 1; i >= 0; i-- {
			_ = syscall.Rmdir(filepath.Join(mnt, parents[i])) // busy while another test's pod is in it
		}
	})
	return cgroupJoin(t, parents[1]+"/kubepods-besteffort-pod"+strings.ReplaceAll(podUID, "-", "_")+".slice")
}

// UnitCgroup makes a cgroup named for the systemd unit (gpusnap-x.service)
// at the top of the hierarchy, as systemd's system.slice units sit, and
// returns a function that moves a process into it. Cleanup removes it once
// its processes have gone.
func UnitCgroup(t testing.TB, unit string) (join func(pid int)) {
	t.Helper()
	return cgroupJoin(t, unit)
}

// cgroupJoin makes the cgroup name and returns the function that moves a
// process into it.
func cgroupJoin(t testing.TB, name string) (join func(pid int)) {
	t.Helper()
	dir, _ := makeCgroup(t, name)
	return func(pid int) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Fatalf("livetest: move %d into %s: %v", pid, dir, err)
		}
	}
}
