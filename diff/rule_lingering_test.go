package diff

import (
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

// TestCheckLingeringUsers holds that a process the log shows use a GPU
// checked, gone now, fails the check while its parent of the same uid, a
// child it forked, or (not root, owned by no job) its uid runs. A job's
// worker whose job has ended, root's process whose parent is another uid's,
// and a use of another GPU do not.
func TestCheckLingeringUsers(t *testing.T) {
	poller := proc(900, 9000, "poller", "/opt/squat", func(p *snapshot.Process) { p.UID = 0 })
	opens := func(p *eventlog.Process, gpu int) eventlog.Event {
		e := devEvent(time.Minute, eventlog.KindOpen, p, "/dev/nvidia"+string(rune('0'+gpu)), "rw", "")
		e.Device.GPU = intp(gpu)
		return e
	}
	run := func(list string, procs []snapshot.Process, events ...eventlog.Event) *Result {
		to := withGPUs(snap("now", procs...), gpuN(0, "GPU-0", 1<<20), gpuN(1, "GPU-1", 1<<20))
		to.Host.CaptureStart = t0.Add(time.Hour)
		s, err := snapshot.ParseGPUList(list)
		if err != nil {
			t.Fatal(err)
		}
		return Check(to, CheckOptions{ZombieThreshold: DefaultZombieThreshold, Events: eventsOf(events...), Since: t0, GPUs: &s})
	}
	holder := &eventlog.Process{PID: 901, StartTime: 9100, PPID: 900, Comm: "holder", Exe: "/opt/squat", UID: 0}
	expect(t, run("0", []snapshot.Process{poller}, opens(holder, 0)), "transient_gpu_process high 901 /dev/nvidia0")
	expect(t, run("1", []snapshot.Process{poller}, opens(holder, 0)))
	expect(t, run("0", nil, opens(holder, 0))) // the poller is gone too

	// The holder forked its successor and left, and the child lives on.
	child := &eventlog.Process{PID: 902, StartTime: 9200, PPID: 1, Comm: "holder", Exe: "/opt/squat", UID: 0}
	fork := eventlog.Event{Time: t0.Add(2 * time.Minute), Kind: eventlog.KindFork, Process: holder, Child: child}
	orphan := *holder
	orphan.PPID = 1
	expect(t, run("0", []snapshot.Process{proc(902, 9200, "holder", "/opt/squat")}, opens(&orphan, 0), fork),
		"transient_gpu_process high 901 /dev/nvidia0")

	// A user's process outside any job, gone, while the user runs another.
	user := &eventlog.Process{PID: 903, StartTime: 9300, PPID: 1, Comm: "python3", Exe: "/usr/bin/python3", UID: 1000}
	shell := proc(904, 9400, "bash", "/usr/bin/bash", func(p *snapshot.Process) { p.UID = 1000 })
	expect(t, run("0", []snapshot.Process{shell}, opens(user, 0)), "transient_gpu_process high 903 /dev/nvidia0")

	// A job's worker, ended with its job, whose user runs another job, and
	// root's worker under a daemon of another uid, are not this rule's.
	worker := &eventlog.Process{PID: 905, StartTime: 9500, PPID: 906, Comm: "python3", Exe: "/usr/bin/python3", UID: 1000, SlurmJobID: "41"}
	otherJob := proc(907, 9700, "python3", "/usr/bin/python3", slurmJob("43"), func(p *snapshot.Process) { p.UID = 1000 })
	daemon := proc(906, 9000, "slurmstepd", "/usr/sbin/slurmstepd", func(p *snapshot.Process) { p.UID = 0 })
	expect(t, run("0", []snapshot.Process{otherJob, daemon}, opens(worker, 0)))
}
