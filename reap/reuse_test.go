package reap

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/internal/testenv"
)

// A PID reused between the judgement and the action is skipped: the pidfd
// opened on it is checked against the start time judged, and the new
// process with the old PID is never signalled.
func TestActorSkipsReusedPID(t *testing.T) {
	testenv.Root(t, "a live test")
	testenv.Tools(t, "sleep")
	judged := startSleep(t)
	old, err := readStat(judged.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	target := Target{PID: judged.Process.Pid, StartTime: old.start, Comm: "sleep"}
	_ = judged.Process.Kill()
	_ = judged.Wait()
	reuser := reusePID(t, target)
	plan := Plan{Actions: []Action{
		{Step: StepFreeze, Process: target, Finding: "unexpected_gpu_process", Class: "leftover_worker", Rule: "leftover_worker"},
		{Step: StepTerminate, Process: target, Finding: "unexpected_gpu_process", Class: "leftover_worker", Rule: "leftover_worker"},
	}}
	for _, o := range (Actor{}).Run(t.Context(), plan) {
		if o.Result != ResultSkipped || !strings.Contains(o.Detail, "the PID was reused") {
			t.Errorf("%s: %s %q, want skipped, naming the reuse", o.Action.Step, o.Result, o.Detail)
		}
	}
	if st, err := readStat(reuser.Process.Pid); err != nil || st.state == 'T' || st.state == 'Z' {
		t.Errorf("the process now at pid %d was touched: state %c, %v", reuser.Process.Pid, st.state, err)
	}
}

func startSleep(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// reusePID starts a process with judged's PID, through the kernel's last
// PID: other forks on the host race for it, so it tries again until one
// wins, and one started in judged's clock tick, which PID@START cannot tell
// from it, does not count.
func reusePID(t *testing.T, judged Target) *exec.Cmd {
	t.Helper()
	pid := judged.PID
	for range 2000 {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			t.Skipf("cannot set the last PID here: %v", err)
		}
		cmd := startSleep(t)
		if st, err := readStat(cmd.Process.Pid); cmd.Process.Pid == pid && err == nil && st.start != judged.StartTime {
			return cmd
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	t.Skipf("pid %d was not free again in 2000 tries: the host forks too much", pid)
	return nil
}
