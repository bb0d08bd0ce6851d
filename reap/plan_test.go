package reap

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/snapshot"
)

// proc is a live process of a plan's host.
func proc(pid, ppid, uid int, comm string) snapshot.Process {
	return snapshot.Process{PID: pid, StartTime: uint64(1000 + pid), PPID: ppid, UID: uid, Comm: comm, State: "S", Threads: 1}
}

// finding is a finding of kind on p with a triage of class.
func finding(kind, class string, sev diff.Severity, p snapshot.Process) diff.Finding {
	ref := &diff.ProcessRef{PID: p.PID, StartTime: p.StartTime, PPID: p.PPID, State: p.State, Comm: p.Comm, UID: p.UID,
		SystemdUnit: p.SystemdUnit, UnitRestart: p.UnitRestart, UnitTimer: p.UnitTimer, Ancestry: p.Ancestry}
	return diff.Finding{Kind: kind, Severity: sev, Process: ref, Triage: &diff.Triage{Class: class, Rule: "row-" + class, Why: []string{"why"}, Next: "next"}}
}

// The decision table (docs/reap.md): what each triage, state and source
// makes of a process, and the order the plan runs its steps in.
func TestBuildDecisionTable(t *testing.T) {
	const (
		gpu    = diff.KindUnexpectedGPUProcess
		worker = 100
	)
	init1, daemon := proc(1, 0, 0, "init"), proc(50, 1, 0, "systemd")
	cases := []struct {
		name  string
		procs []snapshot.Process // the worker first; init is always there
		mod   func(f *diff.Finding)
		opts  Options
		want  []string // "step PID" in order
		why   string   // in the worker's first action's why
	}{
		{name: "a leftover is frozen and terminated", procs: []snapshot.Process{proc(worker, 1, 1000, "python3")},
			want: []string{"freeze 100", "terminate 100"}},
		{name: "an allowed process is left", procs: []snapshot.Process{proc(worker, 1, 1000, "dcgm")},
			mod: func(f *diff.Finding) { f.Triage.Class, f.Allowed = diff.ClassExpected, "comm=dcgm" }, want: []string{"leave 100"}, why: "allowed: an expected workload (comm=dcgm)"},
		{name: "the tenant's running job is left", procs: []snapshot.Process{proc(worker, 1, 1000, "python3")},
			mod: func(f *diff.Finding) { f.Triage.Class = diff.ClassTenant }, want: []string{"leave 100"}, why: "let the job end"},
		{name: "the tenant's own is a leftover once its job has ended", procs: []snapshot.Process{proc(worker, 1, 1000, "python3")},
			mod: func(f *diff.Finding) { f.Triage.Class = diff.ClassTenant }, opts: Options{JobEnded: true}, want: []string{"freeze 100", "terminate 100"}},
		{name: "another tenant's process is left, naming whom to ask", procs: []snapshot.Process{proc(worker, 1, 1000, "python3")},
			mod: func(f *diff.Finding) {
				f.Triage.Class, f.Triage.Next = diff.ClassAnotherTenant, "ask the owner of pod p1"
			},
			want: []string{"leave 100"}, why: "ask the owner of pod p1"},
		{name: "a process in D state is left", procs: []snapshot.Process{proc(worker, 1, 1000, "python3")},
			mod: func(f *diff.Finding) { f.Triage.Class = diff.ClassUnkillable }, want: []string{"leave 100"}, why: "reboot"},
		{name: "a leftover that entered D state is left", procs: []snapshot.Process{func() snapshot.Process { p := proc(worker, 1, 1000, "x"); p.State = "D"; return p }()},
			want: []string{"leave 100"}, why: "D state"},
		{name: "a process gone since is left", procs: nil, want: []string{"leave 100"}, why: "gone"},
		{name: "a PID of another start time is gone", procs: []snapshot.Process{proc(worker, 1, 1000, "x")},
			mod: func(f *diff.Finding) { f.Process.StartTime-- }, want: []string{"leave 100"}, why: "gone"},
		{name: "an unreadable process is left", procs: []snapshot.Process{proc(worker, 1, 1000, "python3")},
			mod: func(f *diff.Finding) { f.Kind = diff.KindUnreadableProcess }, want: []string{"leave 100"}, why: "no finding says it uses a GPU"},
		{name: "a defunct process is reaped through its parent", procs: []snapshot.Process{func() snapshot.Process { p := proc(worker, 60, 1000, "x"); p.State = "Z"; return p }(), proc(60, 1, 1000, "launcher")},
			mod: func(f *diff.Finding) { f.Triage.Class = diff.ClassZombieContext }, want: []string{"reap_defunct 100"}},
		{name: "a suspected compromise's memory is kept first", procs: []snapshot.Process{proc(worker, 1, 1000, "kworker/0:1")},
			mod:  func(f *diff.Finding) { f.Triage.Class = diff.ClassSuspectedCompromise },
			want: []string{"keep_memory 100", "freeze 100", "terminate 100"}},
		{name: "a restarting unit leaves the process without --stop-units", procs: []snapshot.Process{func() snapshot.Process {
			p := proc(worker, 50, 0, "x")
			p.SystemdUnit, p.UnitRestart = "infer.service", "always"
			return p
		}(), daemon}, want: []string{"leave 100"}, why: "--stop-units"},
		{name: "a restarting unit is stopped first with --stop-units", procs: []snapshot.Process{func() snapshot.Process {
			p := proc(worker, 50, 0, "x")
			p.SystemdUnit, p.UnitTimer = "infer.service", "infer.timer"
			return p
		}(), daemon}, opts: Options{StopUnits: true}, want: []string{"stop_unit 100", "freeze 100", "terminate 100"}},
		{name: "a crontab is named, not edited", procs: []snapshot.Process{func() snapshot.Process {
			p := proc(worker, 1, 1000, "x")
			p.Ancestry = []snapshot.Ancestor{{PID: 70, Comm: "cron"}}
			return p
		}()}, want: []string{"name 100", "freeze 100", "terminate 100"}},
		{name: "a parent loop is ended before the worker", procs: []snapshot.Process{proc(worker, 60, 1000, "x"), proc(60, 1, 1000, "sh")},
			want: []string{"freeze 100", "end_parent 60", "terminate 100"}},
		{name: "another user's parent is not ended", procs: []snapshot.Process{proc(worker, 60, 1000, "x"), proc(60, 1, 1001, "sh")},
			want: []string{"freeze 100", "terminate 100"}},
		{name: "a daemon parent is not ended", procs: []snapshot.Process{proc(worker, 60, 1000, "x"), proc(60, 1, 1000, "slurmstepd")},
			want: []string{"freeze 100", "terminate 100"}},
		{name: "a parent in a job's cgroup is not ended", procs: []snapshot.Process{proc(worker, 60, 1000, "x"), func() snapshot.Process { p := proc(60, 1, 1000, "sh"); p.SlurmJobID = "7"; return p }()},
			want: []string{"freeze 100", "terminate 100"}},
		{name: "a process alone in its cgroup is frozen through it", procs: []snapshot.Process{proc(worker, 1, 1000, "x")},
			opts: Options{Cgroups: func(p *snapshot.Process) (string, []int) { return "/escaped", []int{p.PID} }},
			want: []string{"freeze 100 /escaped", "terminate 100"}},
		{name: "an escaped cgroup of leftovers is killed after the terminates", procs: []snapshot.Process{proc(worker, 1, 1000, "x"), proc(101, 1, 1000, "y")},
			opts: Options{Cgroups: func(*snapshot.Process) (string, []int) { return "/escaped", []int{100, 101} }},
			want: []string{"freeze 100", "freeze 101", "terminate 100", "terminate 101", "kill_cgroup 100 /escaped"}},
		{name: "a cgroup with a process not ended is neither frozen nor killed", procs: []snapshot.Process{proc(worker, 1, 1000, "x")},
			opts: Options{Cgroups: func(*snapshot.Process) (string, []int) { return "/shared", []int{100, 7} }},
			want: []string{"freeze 100", "terminate 100"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			to := &snapshot.Snapshot{Processes: append([]snapshot.Process{init1}, c.procs...)}
			var fs []diff.Finding
			for i, p := range c.procs {
				if p.PID == worker || p.PID == 101 {
					f := finding(gpu, diff.ClassLeftoverWorker, diff.High, p)
					if i == 0 && c.mod != nil {
						c.mod(&f)
					}
					fs = append(fs, f)
				}
			}
			if len(c.procs) == 0 {
				fs = []diff.Finding{finding(gpu, diff.ClassLeftoverWorker, diff.High, proc(worker, 1, 1000, "x"))}
			}
			plan := Build(&diff.Result{Findings: fs}, to, c.opts)
			var got []string
			for _, a := range plan.Actions {
				s := a.Step + " " + strconv.Itoa(a.Process.PID)
				if a.Parent != nil && a.Step == StepEndParent {
					s = a.Step + " " + strconv.Itoa(a.Parent.PID)
				}
				if a.Cgroup != "" {
					s += " " + a.Cgroup
				}
				got = append(got, s)
				if !strings.HasPrefix(a.Rule, "row-") || a.Finding == "" || a.Why == "" {
					t.Errorf("%s: not the triage's rule, or no finding or why: %+v", s, a)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("plan %q, want %q", got, c.want)
			}
			if c.why != "" && !strings.Contains(plan.Actions[0].Why, c.why) {
				t.Errorf("why %q lacks %q", plan.Actions[0].Why, c.why)
			}
		})
	}
}

// One finding whose triage spares a process spares it whatever its other
// findings say; a finding with no process plans a leave with its next step.
func TestBuildSparesAndZombies(t *testing.T) {
	p := proc(100, 1, 1000, "x")
	allowed := finding(diff.KindLeftoverDeviceHolder, diff.ClassExpected, diff.Info, p)
	leftover := finding(diff.KindLeftoverDeviceMapping, diff.ClassLeftoverWorker, diff.High, p)
	zombie := diff.Finding{Kind: diff.KindZombieGPUMemory, Severity: diff.High, Triage: &diff.Triage{Class: diff.ClassZombieContext, Next: "drain the node, then reset the GPU"}}
	to := &snapshot.Snapshot{Processes: []snapshot.Process{proc(1, 0, 0, "init"), p}}
	plan := Build(&diff.Result{Findings: []diff.Finding{leftover, allowed, zombie}}, to, Options{})
	if len(plan.Actions) != 2 || plan.Actions[0].Step != StepLeave || plan.Actions[1].Step != StepLeave {
		t.Fatalf("plan %+v: want two leaves", plan.Actions)
	}
	for _, a := range plan.Actions {
		if a.Finding == diff.KindZombieGPUMemory && (!strings.Contains(a.Why, "reset the GPU") || !strings.HasPrefix(a.String(), "leave        (no process) [")) {
			t.Errorf("zombie: %+v, line %q", a, a)
		}
		if a.Process.PID == 100 && a.Class != diff.ClassExpected {
			t.Errorf("the allowed process's leave names class %q", a.Class)
		}
	}
	if len(plan.Targets()) != 0 {
		t.Errorf("targets %+v", plan.Targets())
	}
}

// An MPS server that NVML lists with live clients on its GPU is left.
func TestBuildSparesMPSServerWithClients(t *testing.T) {
	server := proc(100, 1, 1000, snapshot.MPSServerExe[:15])
	server.Exe = "/usr/bin/" + snapshot.MPSServerExe
	client := proc(101, 1, 1000, "python3")
	minor := 0
	to := &snapshot.Snapshot{Processes: []snapshot.Process{proc(1, 0, 0, "init"), server, client}}
	to.NVML.Devices = []snapshot.GPU{{Index: 0, UUID: "GPU-1", MinorNumber: &minor,
		ComputeProcesses: []snapshot.GPUProcess{{PID: 100}}, MPSProcesses: []snapshot.GPUProcess{{PID: 101}}}}
	plan := Build(&diff.Result{Findings: []diff.Finding{finding(diff.KindUnexpectedGPUProcess, diff.ClassLeftoverWorker, diff.High, server)}}, to, Options{})
	if len(plan.Actions) != 1 || plan.Actions[0].Step != StepLeave || !strings.Contains(plan.Actions[0].Why, "101@1101") {
		t.Errorf("plan %+v: want the server left, naming its client", plan.Actions)
	}
}
