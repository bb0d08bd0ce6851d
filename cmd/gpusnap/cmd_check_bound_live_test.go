package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testwait"
)

// TestLiveCheckAllowBoundExe: in a mount namespace of its own (a tenant
// with a user namespace can make one), a process binds /usr/bin/tail over
// /usr/bin/sleep and runs it holding the GPU node: /proc/PID/exe and its
// comm say sleep. The allow list's exe=/usr/bin/sleep still passes the real
// sleep on the host, and no longer the bound one, whose file is not
// coreutils' own (and whose mount namespace is not the host's).
func TestLiveCheckAllowBoundExe(t *testing.T) {
	livetest.Require(t, "losetup", "unshare")
	loop := livetest.NewLoop(t)
	allow := filepath.Join(t.TempDir(), "allow")
	if err := os.WriteFile(allow, []byte("exe=/usr/bin/sleep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	real := startHolding(t, false, "/usr/bin/sleep", "exec 3<>"+loop.Node+"; exec /usr/bin/sleep 300")
	bound := startHolding(t, true, "/usr/bin/sleep", "exec 3<>"+loop.Node+"; mount --bind /usr/bin/tail /usr/bin/sleep && exec /usr/bin/sleep -f /dev/null")
	code, stdout, stderr := gpusnap(t, "check", "--json", "--no-nvml", "--allow", allow)
	var r diff.Result
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("check: exit %d, %v: %s", code, err, stderr)
	}
	got := map[int]diff.Severity{}
	for _, f := range r.Findings {
		if f.Kind == diff.KindGPUInUse && f.Device == loop.Node && f.Process != nil {
			got[f.Process.PID] = f.Severity
			if f.Process.PID == bound && (f.Triage == nil || f.Triage.Class != diff.ClassSuspectedCompromise) {
				t.Errorf("the bound exe's triage: %+v", f.Triage)
			}
		}
	}
	if got[real] != diff.Info || got[bound] != diff.High || code != exitFindings {
		t.Errorf("exit %d; real sleep %d: %q (want info), bound one %d: %q (want high)", code, real, got[real], bound, got[bound])
	}
}

// startHolding runs script (in a private mount namespace where private)
// and waits until its process runs exe (by its exe link) with fd 3 open;
// it is killed, by PID, at cleanup.
func startHolding(t *testing.T, private bool, exe, script string) int {
	t.Helper()
	args := []string{"sh", "-c", script}
	if private {
		args = append([]string{"unshare", "--mount", "--propagation", "private"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	proc := fmt.Sprintf("/proc/%d", pid)
	testwait.Until(t, 10*time.Second, fmt.Sprintf("%q to hold its node as %s", script, exe), func() bool {
		runs, _ := os.Readlink(filepath.Join(proc, "exe"))
		_, err := os.Readlink(filepath.Join(proc, "fd", "3"))
		return err == nil && runs == exe
	})
	return pid
}
