package livetest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// PodCgroup makes the cgroup the kubelet's systemd driver gives a pod,
// kubepods-besteffort-pod<uid with underscores>.slice, and returns a
// function that moves a process into it, so that its /proc/PID/cgroup names
// the pod. Cleanup removes the cgroup once its processes are gone: call it
// before starting them.
func PodCgroup(t testing.TB, podUID string) (join func(pid int)) {
	t.Helper()
	return cgroupJoin(t, "kubepods-besteffort-pod"+strings.ReplaceAll(podUID, "-", "_")+".slice")
}

// UnitCgroup makes a cgroup named for the systemd unit (gpusnap-x.service)
// at the top of the hierarchy, as systemd's system.slice units sit, and
// returns a function that moves a process into it; cleanup removes it once
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
