package livetest

import (
	"bufio"
	_ "embed"
	"os/exec"
	"testing"
)

// parkerSource is the C helper that parks a device's open file in its own
// unix socket's receive queue (SCM_RIGHTS to itself) and closes its fd.
//
//go:embed helper/parker.c
var parkerSource []byte

// StartParker runs a process that opens path read-write, sends the fd to
// itself over a unix socket pair without receiving it, closes its own copy
// and stays alive. /proc shows no holder or mapping of path, yet the file
// is open. Cleanup kills it.
func StartParker(t testing.TB, path string) Proc {
	t.Helper()
	cmd := exec.Command(buildC(t, "parker", parkerSource), path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("livetest: parker: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("livetest: parker: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill() // by the PID this test started
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "parked\n" {
		t.Fatalf("livetest: parker %s: %q, %v", path, line, err)
	}
	p, err := newProc(cmd.Process.Pid, cmd.Process.Pid)
	if err != nil {
		t.Fatalf("livetest: parker: %v", err)
	}
	return p
}
