package diff

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

// hide records pid as hidden from /proc in s (start 0: the /proc path's
// record, which knows no start time).
func hide(s *snapshot.Snapshot, pid int, start uint64) *snapshot.Snapshot {
	s.Scan.Hidden = append(s.Scan.Hidden, snapshot.HiddenProcess{PID: pid, StartTime: start,
		Why: "/proc/" + strconv.Itoa(pid) + " is a mount of another filesystem (device 0:41) over the process's directory, yet pidfd_open succeeds: the kernel still has the process"})
	return s
}

func TestHiddenProcess(t *testing.T) {
	bash := proc(10, 5, "bash", "/usr/bin/bash")
	// New at TO: high, with the kernel's word as evidence.
	r := compare(snap("from", bash), hide(snap("to", bash), 7, 0))
	expect(t, r, "hidden_process high 7")
	if f := r.Findings[0]; len(f.Evidence) != 1 || !strings.Contains(f.Evidence[0], "pidfd_open succeeds") || !strings.Contains(f.Summary, "pid 7 is hidden") {
		t.Errorf("finding %+v", f)
	}
	if !r.Failed(Medium) {
		t.Error("a hidden process does not fail the diff")
	}
	// Hidden at both ends, as the same process: not compared either way.
	r = compare(hide(snap("from", bash), 7, 900), hide(snap("to", bash), 7, 900))
	expect(t, r)
	if r.Complete || len(r.Notes) == 0 || !strings.Contains(strings.Join(r.Notes, "\n"), "hidden from /proc at both ends") {
		t.Errorf("hidden at both ends: complete %v, notes %q", r.Complete, r.Notes)
	}
	// The same PID, another process (start times differ): new.
	expect(t, compare(hide(snap("from", bash), 7, 900), hide(snap("to", bash), 7, 950)), "hidden_process high 7")
	// check fails on it, whatever GPUs it checks: a hidden process may use any.
	for _, list := range []string{"", "1"} {
		expect(t, check(t, hide(withGPUs(snap("now", bash), gpuN(0, "GPU-0", 0), gpuN(1, "GPU-1", 0)), 7, 0), list, ""), "hidden_process high 7")
	}
}

// A capture that stopped at its bound while processes still vanished unread
// is not complete, and a tenant can cause it: it is a medium finding of the
// diff and of a check, so neither exits 0.
func TestUnsettledCaptureFails(t *testing.T) {
	bash := proc(10, 5, "bash", "/usr/bin/bash")
	to := snap("to", bash)
	to.Scan.Unsettled = "3 processes of the last of 9 listings vanished before they were read"
	r := compare(snap("from", bash), to)
	if r.Complete || !r.Failed(Medium) || len(r.Findings) != 1 || r.Findings[0].Kind != KindUnreadableProcess ||
		!strings.Contains(r.Findings[0].Summary, "did not settle") {
		t.Errorf("unsettled TO: complete %v, findings %+v", r.Complete, r.Findings)
	}
	if c := Check(to, CheckOptions{}); !c.Failed(Medium) {
		t.Errorf("check of an unsettled capture: findings %+v", c.Findings)
	}
}
