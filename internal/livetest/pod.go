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

// PodCgroup makes the cgroup the kubelet's systemd driver gives a pod,
// kubepods-besteffort-pod<uid with underscores>.slice, in the hierarchy
// newCgroup uses, and returns a function that moves a process into it, so
// that its /proc/PID/cgroup names the pod. Cleanup removes the cgroup once
// its processes are gone: register it before starting them.
func PodCgroup(t testing.TB, podUID string) (join func(pid int)) {
	t.Helper()
	mnt, _, err := cgroupMount()
	if err != nil {
		t.Skipf("live /proc test: no cgroup hierarchy to place a pod in: %v", err)
	}
	dir := filepath.Join(mnt, "kubepods-besteffort-pod"+strings.ReplaceAll(podUID, "-", "_")+".slice")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("live /proc test: cannot create a cgroup here: %v", err)
	}
	t.Cleanup(func() {
		err := waitFor("cgroup "+dir+" to empty", func() bool {
			err := syscall.Rmdir(dir)
			return err == nil || errors.Is(err, syscall.ENOENT)
		})
		if err != nil {
			t.Errorf("livetest: %v", err)
		}
	})
	return func(pid int) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Fatalf("livetest: move %d into %s: %v", pid, dir, err)
		}
	}
}
