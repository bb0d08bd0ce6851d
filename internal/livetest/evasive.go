package livetest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/gpusnap/gpusnap/internal/testwait"
)

// HoldRegistered starts a process that opens path read-write, registers the
// fd with an io_uring (IORING_REGISTER_FILES), closes it and sleeps. Its fd
// directory shows only the ring, whose fdinfo lists the file. Cleanup kills
// it by PID.
func HoldRegistered(t testing.TB, path string) Proc {
	t.Helper()
	procs, exited := runTenant(t, exec.Command(buildTenant(t), "-u", path), "tenant")
	p := procs["tenant"]
	killOnCleanup(t, p, exited)
	return p
}

// Hop starts a child subreaper whose descendant maps path MAP_SHARED
// read-write, closes the fd, then forks and exits every 50-500 us, so at
// every instant some process maps path, never under one PID for long. It
// returns the subreaper, which adopts each hopper. Cleanup kills the
// subreaper's process group, which every hopper stays in, by its PID.
func Hop(t testing.TB, path string) Proc {
	t.Helper()
	OwnNoisyHost(t)
	procs, exited := runTenant(t, exec.Command(buildTenant(t), "-H", path), "tenant")
	p := procs["tenant"]
	t.Cleanup(func() {
		if st, _, err := readStat(p.PID); err == nil && st == p.StartTime {
			_ = syscall.Kill(-p.PID, syscall.SIGKILL)
		}
		<-exited
		// A hopper forked as the signal came is killed by it too (a fork
		// that races a group signal is restarted), so none may outlive the
		// test.
		if err := testwait.For(waitLimit, fmt.Sprintf("process group %d to empty", p.PID), func() bool {
			return errors.Is(syscall.Kill(-p.PID, 0), syscall.ESRCH)
		}); err != nil {
			t.Errorf("livetest: %v", err)
		}
	})
	return p
}

// HideProc mounts over /proc/PID, as root can, so the directory does not read
// as the process. It mounts an empty bind mount, or with fake a tmpfs of a
// made-up process's files. Cleanup unmounts it lazily, since a reader may
// hold it open. Call it after starting the process, so its cleanup runs
// before the process is killed.
func HideProc(t testing.TB, pid int, fake map[string]string) {
	t.Helper()
	target := mountOverProc(t, pid, func(target string) error {
		if fake == nil {
			return syscall.Mount(t.TempDir(), target, "", syscall.MS_BIND, "")
		}
		return syscall.Mount("tmpfs", target, "tmpfs", 0, "size=64k,mode=0555")
	})
	for name, text := range fake {
		if err := os.WriteFile(filepath.Join(target, name), []byte(text), 0o444); err != nil {
			t.Fatalf("livetest: %v", err)
		}
	}
}

// HideProcBehind bind-mounts /proc/other over /proc/pid (root), which shows
// the same procfs and a real process's files, none of them pid's. Cleanup
// unmounts it.
func HideProcBehind(t testing.TB, pid, other int) {
	t.Helper()
	mountOverProc(t, pid, func(target string) error {
		return syscall.Mount("/proc/"+strconv.Itoa(other), target, "", syscall.MS_BIND, "")
	})
}

// mountOverProc mounts something over /proc/pid with mount and unmounts it
// at Cleanup. It returns /proc/pid.
func mountOverProc(t testing.TB, pid int, mount func(target string) error) string {
	t.Helper()
	Require(t)
	OwnNoisyHost(t)
	target := "/proc/" + strconv.Itoa(pid)
	if err := mount(target); err != nil {
		t.Skipf("livetest: mount over %s: %v", target, err)
	}
	t.Cleanup(func() {
		// Once the process is reaped its directory goes, and the kernel
		// detaches what was mounted on it, which ENOENT says.
		if err := syscall.Unmount(target, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.EINVAL) {
			t.Errorf("livetest: unmount %s: %v", target, err)
		}
	})
	return target
}
