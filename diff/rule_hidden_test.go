package diff

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

// hide records pid as hidden from /proc in s, with start 0 as the /proc
// path's record has it, which knows no start time.
func hide(s *snapshot.Snapshot, pid int, start uint64) *snapshot.Snapshot {
	s.Scan.Hidden = append(s.Scan.Hidden, snapshot.HiddenProcess{PID: pid, StartTime: start,
		Why: "/proc/" + strconv.Itoa(pid) + " is a mount of another filesystem (device 0:41) over the process's directory, yet pidfd_open succeeds: the kernel still has the process"})
	return s
}

func TestHiddenProcess(t *testing.T) {
	bash := proc(10, 5, "bash", "/usr/bin/bash")
	// New at TO is high, with the kernel's word as evidence.
	r := compare(snap("from", bash), hide(snap("to", bash), 7, 0))
	expect(t, r, "hidden_process high 7")
	if f := r.Findings[0]; len(f.Evidence) != 1 || !strings.Contains(f.Evidence[0], "pidfd_open succeeds") || !strings.Contains(f.Summary, "pid 7 is hidden") {
		t.Errorf("finding %+v", f)
	}
	if !r.Failed(Medium) {
		t.Error("a hidden process does not fail the diff")
	}
	// Hidden at both ends, as the same process, it is not compared either way.
	r = compare(hide(snap("from", bash), 7, 900), hide(snap("to", bash), 7, 900))
	expect(t, r)
	if r.Complete || len(r.Notes) == 0 || !strings.Contains(strings.Join(r.Notes, "\n"), "hidden from /proc at both ends") {
		t.Errorf("hidden at both ends: complete %v, notes %q", r.Complete, r.Notes)
	}
	// The same PID, another process (start times differ), is new.
	expect(t, compare(hide(snap("from", bash), 7, 900), hide(snap("to", bash), 7, 950)), "hidden_process high 7")
	// check fails on it, whatever GPUs it checks, as a hidden process may use any.
	for _, list := range []string{"", "1"} {
		expect(t, check(t, hide(withGPUs(snap("now", bash), gpuN(0, "GPU-0", 0), gpuN(1, "GPU-1", 0)), 7, 0), list, ""), "hidden_process high 7")
	}
}

// A capture that stopped at its bound while processes still vanished unread
// is not complete, and a tenant can cause it. It is a medium finding of the
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

// TestHiddenProcessNamed holds that a process behind a mount over /proc/PID
// is named where something still holds its name. The event log's record of
// the PID (its device use first) names a ghost new since FROM. FROM names a
// PID it had, saying the PID could have been reused when the capture knew no
// start time. A PID neither knows stays a bare PID, and a log record of
// another process with that PID names nothing. With no start time known the
// name is the summary's only, and the finding's process stays the bare PID.
// Its device use in the log is a transient one, hidden at TO rather than
// gone.
func TestHiddenProcessNamed(t *testing.T) {
	bash := proc(10, 5, "bash", "/usr/bin/bash")
	ghost := &eventlog.Process{PID: 7, StartTime: 9000, Comm: "xmrig", Exe: "/dev/shm/.x/xmrig", UID: 1000}
	events := eventsOf(
		eventlog.Event{Time: t0.Add(5 * time.Minute), Kind: eventlog.KindExec, Process: ghost},
		devEvent(6*time.Minute, eventlog.KindMmap, ghost, "/dev/nvidia0", "", "rw-s"),
		eventlog.Event{Time: t0.Add(7 * time.Minute), Kind: eventlog.KindExec, Process: ghost},
	)
	r := compareWindow(Options{Events: events}, snap("from", bash), hide(snap("to", bash), 7, 0))
	expect(t, r, "hidden_process high 7", "transient_gpu_process high 7 /dev/nvidia0")
	if f := r.Findings[1]; !strings.Contains(f.Summary, "is hidden from /proc at TO") {
		t.Errorf("the transient use of a hidden process: %+v", f)
	}
	f := r.Findings[0]
	if f.Process.StartTime != 0 || f.Process.Exe != "" || !strings.Contains(f.Summary, "pid 7 (xmrig, /dev/shm/.x/xmrig") ||
		!strings.Contains(f.Summary, "the event log names it") || len(f.Evidence) != 2 || !strings.Contains(f.Evidence[1], "mmap") {
		t.Errorf("named by the log: %+v", f)
	}
	// The log's PID 7 is another process than the one the BPF path saw.
	r = compareWindow(Options{Events: events}, snap("from", bash), hide(snap("to", bash), 7, 9500))
	if f := r.Findings[0]; f.Process.Exe != "" || !strings.HasPrefix(f.Summary, "pid 7 is hidden") {
		t.Errorf("another process's record named it: %+v", f)
	}
	// FROM had the PID, so it names it and says the PID may have been reused.
	miner := proc(7, 800, "python3", "/home/bob/.cache/m")
	r = compare(snap("from", bash, miner), hide(snap("to", bash), 7, 0))
	expect(t, r, "hidden_process high 7")
	if f := r.Findings[0]; f.Process.StartTime != 0 || f.Process.Exe != "" || !strings.Contains(f.Summary, "pid 7 (python3, /home/bob/.cache/m") ||
		!strings.Contains(f.Summary, "FROM names the PID (7@800), the same process unless the PID was reused") {
		t.Errorf("named by FROM: %+v", f)
	}
	// Nothing names PID 8.
	r = compare(snap("from", bash, miner), hide(snap("to", bash), 8, 0))
	if f := r.Findings[0]; f.Process.Comm != "" || !strings.HasPrefix(f.Summary, "pid 8 is hidden") {
		t.Errorf("named by nothing: %+v", f)
	}
}

// In TestHiddenProcessNotAllowedByFrom a tenant hides a process on a PID an
// allowed daemon had at FROM, on the /proc path (no start time). Neither
// FROM's process nor the log's record of the PID vouches for what the PID
// holds now. No allow entry downgrades it, and its triage takes no class
// from FROM's process. With the start time known, FROM's same process is
// allowed as before.
func TestHiddenProcessNotAllowedByFrom(t *testing.T) {
	bash := proc(10, 5, "bash", "/usr/bin/bash")
	daemon := proc(7, 800, "nv-hostengine", "/usr/bin/nv-hostengine")
	daemon.User = "root"
	allow, err := ParseAllow(strings.NewReader("exe=/usr/bin/nv-hostengine user=root\n"), "allow.list")
	if err != nil {
		t.Fatal(err)
	}
	r := compareWindow(Options{Allow: allow}, snap("from", bash, daemon), hide(snap("to", bash), 7, 0))
	expect(t, r, "hidden_process high 7")
	f := r.Findings[0]
	if f.Allowed != "" || f.Triage == nil || f.Triage.Class == ClassExpected ||
		!strings.Contains(f.Summary, "nv-hostengine") || !strings.Contains(strings.Join(f.Evidence, "\n"), "FROM: pid 7 (nv-hostengine") {
		t.Errorf("allowed through FROM's process at its PID: %+v", f)
	}
	// FROM had another job's process at the PID, and the tenant's hidden
	// one is not that job's.
	other := proc(7, 800, "python3", "/usr/bin/python3", set(func(p *snapshot.Process) {
		p.SlurmJobID = "77"
		p.Cgroups = []string{"0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0"}
	}))
	r = Compare(tenantSnap("from", "4242", bash, other), hide(tenantSnap("to", "4242", bash), 7, 0), Options{})
	if f := r.Findings[0]; f.Triage == nil || f.Triage.Class == ClassAnotherTenant || f.Severity != High {
		t.Errorf("triaged as FROM's process at its PID: %+v %+v", f, f.Triage)
	}
	ghost := &eventlog.Process{PID: 7, StartTime: 800, Comm: "nv-hostengine", Exe: "/usr/bin/nv-hostengine"}
	events := eventsOf(eventlog.Event{Time: t0.Add(5 * time.Minute), Kind: eventlog.KindExec, Process: ghost})
	r = compareWindow(Options{Allow: allow, Events: events}, snap("from", bash, daemon), hide(snap("to", bash), 7, 0))
	if f := r.Findings[0]; f.Severity != High || f.Allowed != "" {
		t.Errorf("allowed through the log's record of its PID: %+v", f)
	}
	r = compareWindow(Options{Allow: allow}, snap("from", bash, daemon), hide(snap("to", bash), 7, 800))
	if f := r.Findings[0]; f.Severity != Info || f.Process.StartTime != 800 {
		t.Errorf("the same process, start time known: %+v", f)
	}
}
