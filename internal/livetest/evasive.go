package livetest

import (
	"os/exec"
	"testing"
)

// HoldRegistered starts a process that opens path read-write, registers the
// fd with an io_uring (IORING_REGISTER_FILES), closes it and sleeps: its fd
// directory shows only the ring, whose fdinfo lists the file. Cleanup kills
// it by PID.
func HoldRegistered(t testing.TB, path string) Proc {
	t.Helper()
	procs, exited := runTenant(t, exec.Command(buildTenant(t), "-u", path), "tenant")
	p := procs["tenant"]
	killOnCleanup(t, p, exited)
	return p
}
