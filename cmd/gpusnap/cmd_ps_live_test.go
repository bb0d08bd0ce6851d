package main

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
)

// A GPU user stuck in D state (a read from a FUSE file whose daemon never
// answers, as on a hung network file system or driver call) is unkillable
// in ps --json, with the kernel function it waits in; ps's table gives it a
// why line that says to drain and reboot.
func TestLivePsUnkillable(t *testing.T) {
	livetest.Require(t, "losetup", "python3")
	loop := livetest.NewLoop(t)
	stuck := livetest.MapThenStick(t, loop.Node, livetest.StuckFUSE(t))
	flags := []string{"--db", filepath.Join(t.TempDir(), "gpusnap.db"), "--no-nvml"}
	code, stdout, stderr := gpusnap(t, append([]string{"ps", "--json"}, flags...)...)
	if code != 0 {
		t.Fatalf("ps --json: exit %d: %s", code, stderr)
	}
	var rep struct {
		Processes []struct {
			PID    int         `json:"pid"`
			State  string      `json:"state"`
			Wchan  string      `json:"wchan"`
			Triage diff.Triage `json:"triage"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("ps --json: %v", err)
	}
	found := false
	for _, p := range rep.Processes {
		if p.PID != stuck.PID {
			continue
		}
		found = true
		if p.State != "D" || p.Wchan == "" || p.Triage.Class != diff.ClassUnkillable || !strings.Contains(p.Triage.Next, "reboot") {
			t.Errorf("pid %d: state %q wchan %q triage %+v, want D, a wchan, unkillable whose next reboots", p.PID, p.State, p.Wchan, p.Triage)
		}
	}
	if !found {
		t.Fatalf("ps --json lacks the stuck pid %d", stuck.PID)
	}
	code, stdout, stderr = gpusnap(t, append([]string{"ps"}, flags...)...)
	if code != 0 {
		t.Fatalf("ps: exit %d: %s", code, stderr)
	}
	rows := strings.Split(stdout, "\n")
	for i, row := range rows {
		if f := strings.Fields(row); len(f) > 0 && f[0] == strconv.Itoa(stuck.PID) {
			if i+1 >= len(rows) || !strings.Contains(rows[i+1], "why: pid "+strconv.Itoa(stuck.PID)+" is in D state") {
				t.Errorf("the stuck process's row has no why line:\n%s", stdout)
			}
			return
		}
	}
	t.Errorf("ps lacks the stuck pid %d:\n%s", stuck.PID, stdout)
}
