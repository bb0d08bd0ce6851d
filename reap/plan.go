// Package reap turns one judgement's findings into what gpusnap reap does.
// That is a plan of actions, each on a process named by PID@START and
// chosen by its finding's triage (docs/reap.md has the decision table), and
// the actions themselves, each through a handle that cannot reach another
// process. Planning is pure, while acting reads /proc and signals.
package reap

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/snapshot"
)

// Steps say what one action does, in the order a plan runs them.
const (
	StepLeave      = "leave"       // never touched, with the reason and what to do instead
	StepName       = "name"        // a restarting source gpusnap does not edit (a crontab, an at job)
	StepKeepMemory = "keep_memory" // the process's memory outside device mappings, kept as evidence
	StepStopUnit   = "stop_unit"   // systemctl stop the unit and its timer (--stop-units)
	StepFreeze     = "freeze"      // cgroup.freeze of a cgroup it is alone in, else SIGSTOP
	StepEndParent  = "end_parent"  // the parent that would start it again, ended first
	StepTerminate  = "terminate"   // SIGTERM, --grace, SIGKILL, through a pidfd
	StepKillCgroup = "kill_cgroup" // cgroup.kill of an escaped cgroup holding only leftovers
	StepReapParent = "reap_defunct"
)

// stepOrder is the order steps run in, evidence first, then the sources that
// would bring a process back, then the freeze that keeps anything new from
// starting while the kills run.
var stepOrder = []string{StepLeave, StepName, StepKeepMemory, StepStopUnit, StepFreeze, StepEndParent, StepTerminate, StepKillCgroup, StepReapParent}

// Target is a process as the judgement saw it. An action reaches it only
// while its PID still has this start time.
type Target struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	Comm      string `json:"comm"`
	UID       int    `json:"uid"`
}

// Key is the target's PID@START.
func (t Target) Key() string { return snapshot.ProcessKey(t.PID, t.StartTime) }

// String names the process, or says there is none, since a finding of no
// process (memory no process accounts for) plans a leave line too.
func (t Target) String() string {
	if t.PID == 0 {
		return "(no process)"
	}
	return fmt.Sprintf("%s (%s)", t.Key(), t.Comm)
}

// Action is one line of a plan.
type Action struct {
	Step    string `json:"step"`
	Process Target `json:"process"`
	// Finding is the kind of the finding that put the process in the plan,
	// Class and Rule the triage that chose the step.
	Finding string `json:"finding"`
	Class   string `json:"class"`
	Rule    string `json:"rule"`
	// Unit and Timer are what StepStopUnit stops, and Cgroup is what
	// StepFreeze freezes or StepKillCgroup kills ("" for SIGSTOP).
	Unit   string `json:"unit,omitempty"`
	Timer  string `json:"timer,omitempty"`
	Cgroup string `json:"cgroup,omitempty"`
	// Parent is whom StepEndParent ends or StepReapParent asks to reap.
	Parent *Target `json:"parent,omitempty"`
	// Why says what decided the step, in one line.
	Why string `json:"why"`
}

func (a Action) String() string {
	s := fmt.Sprintf("%-12s %s", a.Step, a.Process)
	if a.Parent != nil {
		s += " parent " + a.Parent.String()
	}
	return s + fmt.Sprintf(" [%s, %s]: %s", a.Finding, a.Rule, a.Why)
}

// Plan is the ordered actions of one judgement.
type Plan struct {
	Actions []Action `json:"actions"`
}

// Targets are the processes the plan ends (terminate, kill_cgroup), and
// the parents it ends first, by PID@START.
func (p Plan) Targets() []Target {
	var out []Target
	for _, a := range p.Actions {
		switch a.Step {
		case StepTerminate:
			out = append(out, a.Process)
		case StepEndParent:
			out = append(out, *a.Parent)
		}
	}
	return out
}

// Options tune a plan.
type Options struct {
	// StopUnits lets the plan stop a restarting unit and its timer. Without
	// it a process a unit restarts is left, with the flag named.
	StopUnits bool
	// JobEnded says the tenant's job has ended (an epilog runs after it).
	// A process its cgroup still names the job's is then a leftover, not
	// the running job's.
	JobEnded bool
	// Cgroups gives a process's cgroup v2 path and the PIDs in it, where it
	// is one gpusnap may freeze or kill (not the root, a slice or init's),
	// and "" where not. A nil Cgroups (a fixture, another proc root) freezes
	// with SIGSTOP.
	Cgroups func(p *snapshot.Process) (path string, members []int)
}

// Build plans what to do about r's findings on the host to (the snapshot r
// judged), one decision per process, by its triage. Findings with no
// process and no triage plan nothing.
func Build(r *diff.Result, to *snapshot.Snapshot, o Options) Plan {
	procs := map[int]*snapshot.Process{}
	for i := range to.Processes {
		procs[to.Processes[i].PID] = &to.Processes[i]
	}
	var acts []Action
	decided := map[string]bool{}
	for _, f := range worstFirst(r.Findings, o) {
		if f.Triage == nil || (f.Process != nil && decided[f.Process.Key()]) {
			continue
		}
		if f.Process == nil {
			acts = append(acts, Action{Step: StepLeave, Finding: f.Kind, Class: f.Triage.Class, Rule: RuleOf(f.Triage), Why: f.Triage.Next})
			continue
		}
		decided[f.Process.Key()] = true
		d := decision{f: f, p: procs[f.Process.PID], procs: procs, opts: o, to: to}
		if d.p != nil && d.p.StartTime != f.Process.StartTime {
			d.p = nil
		}
		acts = append(acts, d.actions()...)
	}
	acts = cgroupActions(acts, procs, o)
	slices.SortStableFunc(acts, func(a, b Action) int {
		return cmp.Compare(slices.Index(stepOrder, a.Step), slices.Index(stepOrder, b.Step))
	})
	return Plan{Actions: acts}
}

// worstFirst orders findings so that a process's deciding finding comes
// first. A finding whose triage spares the process comes before all others,
// then one of its use of a GPU, then the rest by severity.
func worstFirst(fs []diff.Finding, o Options) []diff.Finding {
	out := slices.Clone(fs)
	slices.SortStableFunc(out, func(a, b diff.Finding) int {
		return cmp.Or(cmp.Compare(rank(b, o), rank(a, o)), cmp.Compare(b.Severity, a.Severity))
	})
	return out
}

// rank is how much a finding decides its process's step.
func rank(f diff.Finding, o Options) int {
	switch {
	case f.Triage != nil && sparedWhy(f.Triage.Class, o) != "":
		return 2
	case gpuUse[f.Kind]:
		return 1
	}
	return 0
}

// gpuUse are the kinds that say a live process uses a GPU now, the only
// ones a process is ended for. An unreadable process may use none.
var gpuUse = map[string]bool{
	diff.KindLeftoverDeviceMapping: true, diff.KindLeftoverDeviceHolder: true, diff.KindUnexpectedGPUProcess: true,
	diff.KindRenamedDeviceNode: true, diff.KindOutOfAllocation: true, diff.KindGPUInUse: true,
	diff.KindHiddenDeviceUse: true, diff.KindEgressConnection: true, diff.KindPersistence: true,
	diff.KindOrphanGPUProcess: true,
}

// RuleOf names the row of docs/triage.md's decision table that chose t. A
// verdict recorded before triage named its rows gives its class.
func RuleOf(t *diff.Triage) string { return cmp.Or(t.Rule, t.Class) }

// sparedWhy says why a process of class is never touched, or "". The
// tenant's own is the running job's until the job has ended.
func sparedWhy(class string, o Options) string {
	if class == diff.ClassTenant && o.JobEnded {
		return ""
	}
	return spared[class]
}

// spared are the classes whose process is never touched, with why.
var spared = map[string]string{
	diff.ClassExpected:      "allowed: an expected workload",
	diff.ClassTenant:        "the tenant's job still runs it: let the job end, then reap again",
	diff.ClassAnotherTenant: "another tenant's",
	diff.ClassUnkillable:    "in D state, where no signal ends it: drain the node and reboot it",
}

// decision is the plan for one process's finding.
type decision struct {
	f     diff.Finding
	p     *snapshot.Process // at the judgement, nil when gone
	procs map[int]*snapshot.Process
	to    *snapshot.Snapshot
	opts  Options
}

func (d decision) action(step, why string) Action {
	ref := d.f.Process
	return Action{Step: step, Process: Target{PID: ref.PID, StartTime: ref.StartTime, Comm: ref.Comm, UID: ref.UID},
		Finding: d.f.Kind, Class: d.f.Triage.Class, Rule: RuleOf(d.f.Triage), Why: why}
}

func (d decision) actions() []Action {
	t := d.f.Triage
	if why := sparedWhy(t.Class, d.opts); why != "" {
		switch {
		case t.Class == diff.ClassAnotherTenant:
			why += ": " + t.Next // whom to ask
		case t.Class == diff.ClassExpected && d.f.Allowed != "":
			why += " (" + d.f.Allowed + ")"
		}
		return []Action{d.action(StepLeave, why)}
	}
	switch {
	case d.p == nil:
		return []Action{d.action(StepLeave, "gone since the judgement: "+t.Next)}
	case d.p.State == "D":
		// Judged before it entered D state, and still no signal ends it.
		return []Action{d.action(StepLeave, spared[diff.ClassUnkillable])}
	case d.p.Defunct():
		return d.reapDefunct()
	case t.Class == diff.ClassZombieContext:
		return []Action{d.action(StepLeave, t.Next)}
	case !gpuUse[d.f.Kind]:
		return []Action{d.action(StepLeave, "no finding says it uses a GPU now ("+d.f.Kind+"): "+t.Next)}
	case t.Class != diff.ClassLeftoverWorker && t.Class != diff.ClassSuspectedCompromise && t.Class != diff.ClassTenant:
		return []Action{d.action(StepLeave, "class "+t.Class+" is not reaped: "+t.Next)}
	}
	if clients := d.mpsClients(); clients != "" {
		return []Action{d.action(StepLeave, "an MPS server with live clients ("+clients+"): killing it fails their work")}
	}
	var acts []Action
	if t.Class == diff.ClassSuspectedCompromise {
		acts = append(acts, d.action(StepKeepMemory, "suspected compromise: its memory is kept before it is killed; contain the node too"))
	}
	sources, ok := d.restartSources()
	acts = append(acts, sources...)
	if !ok {
		return acts
	}
	acts = append(acts, d.action(StepFreeze, "stopped first, so that nothing it does races the kills"))
	if parent := d.restartingParent(); parent != nil {
		a := d.action(StepEndParent, fmt.Sprintf("its parent %s would start it again", parent))
		a.Parent = parent
		acts = append(acts, a)
	}
	why := strings.Join(t.Why, "; ")
	if t.Class == diff.ClassTenant {
		why = "the tenant's job has ended, and " + why
	}
	return append(acts, d.action(StepTerminate, "SIGTERM, then SIGKILL after the grace: "+why))
}

// restartSources are the steps for what would start p again, its unit and
// timer (stopped only with StopUnits, else p is left) and a crontab or at
// job (named). ok is false when p must be left.
func (d decision) restartSources() (acts []Action, ok bool) {
	p := d.f.Process
	if (p.UnitRestart != "" && p.UnitRestart != "no") || p.UnitTimer != "" {
		if !d.opts.StopUnits {
			return []Action{d.action(StepLeave, fmt.Sprintf("its unit %s restarts it (Restart=%s, timer %q): give --stop-units to stop the unit and its timer first",
				p.SystemdUnit, cmp.Or(p.UnitRestart, "no"), p.UnitTimer))}, false
		}
		a := d.action(StepStopUnit, fmt.Sprintf("its unit %s restarts it: stopped first", p.SystemdUnit))
		a.Unit, a.Timer = p.SystemdUnit, p.UnitTimer
		acts = append(acts, a)
	}
	for _, a := range p.Ancestry {
		if schedulers[a.Comm] || (a.Exe != "" && schedulers[path.Base(a.Exe)]) {
			acts = append(acts, d.action(StepName, fmt.Sprintf("descends from %s (pid %d): a crontab or at job starts it; gpusnap edits neither: remove it by hand", a.Comm, a.PID)))
			break
		}
	}
	return acts, true
}

// schedulers are the daemons that start jobs on a schedule.
var schedulers = map[string]bool{"cron": true, "crond": true, "anacron": true, "atd": true}

// keepParents are the parents that start processes for others, never a
// job's loop. Ending one ends far more than the leftover.
var keepParents = map[string]bool{
	"systemd": true, "init": true, "sshd": true, "login": true, "su": true, "sudo": true,
	"slurmd": true, "slurmstepd": true, "containerd-shim": true, "containerd-shim-runc-v2": true,
	"conmon": true, "tmux: server": true, "screen": true, "kubelet": true, "dockerd": true,
	"containerd": true, "cron": true, "crond": true, "atd": true, "nvidia-cuda-mps": true,
}

// restartingParent is p's parent when it would start p again, that is
// alive, not init, run by p's user, outside any job, pod or container, and
// no daemon that starts processes for others. A job's loop, a Ray raylet or a
// launcher left behind with its worker, is a leftover too.
func (d decision) restartingParent() *Target {
	parent := d.procs[d.p.PPID]
	switch {
	case parent == nil || parent.PID <= 1 || parent.KernelThread || parent.Defunct() || parent.StartTime > d.p.StartTime:
		return nil
	case parent.UID != d.p.UID || parent.UID == 0 && d.p.UID == 0 && parent.SystemdUnit != "":
		return nil
	case parent.SlurmJobID != "" || parent.PodUID != "" || parent.ContainerID != "" || keepParents[parent.Comm] || parent.State == "D":
		return nil
	}
	return &Target{PID: parent.PID, StartTime: parent.StartTime, Comm: parent.Comm, UID: parent.UID}
}

// reapDefunct asks p's parent to reap it, since a defunct process runs
// nothing and only its parent's wait frees it.
func (d decision) reapDefunct() []Action {
	parent := d.procs[d.p.PPID]
	if parent == nil || parent.StartTime > d.p.StartTime {
		return []Action{d.action(StepLeave, fmt.Sprintf("defunct, and its parent %d was not seen: drain the node and reset the GPU", d.p.PPID))}
	}
	a := d.action(StepReapParent, fmt.Sprintf("defunct: its parent is sent SIGCHLD to reap it; if it does not, %s", d.f.Triage.Next))
	a.Parent = &Target{PID: parent.PID, StartTime: parent.StartTime, Comm: parent.Comm, UID: parent.UID}
	return []Action{a}
}

// mpsClients names the live processes NVML lists as MPS clients on a GPU
// where it lists p, an MPS server, or "" when p is none or has none.
func (d decision) mpsClients() string {
	if !d.p.MPSServer() {
		return ""
	}
	var names []string
	for _, g := range snapshot.GPUUsage(d.to) {
		if !slices.ContainsFunc(g.Processes, func(u snapshot.GPUProcessUse) bool { return u.PID == d.p.PID }) {
			continue
		}
		for _, u := range g.Processes {
			if u.PID != d.p.PID && strings.Contains(u.Types, "M") && u.Process != nil && !u.Process.Defunct() {
				names = append(names, u.Process.Key())
			}
		}
	}
	return strings.Join(names, ", ")
}

// cgroupActions freezes through its cgroup a process alone in one gpusnap
// may freeze, and adds one cgroup.kill, after the terminates, for each such
// cgroup that holds more than one process, all of them ended by the plan.
// Such a cgroup is an escaped cgroup of leftovers, emptied whatever its
// processes do.
func cgroupActions(acts []Action, procs map[int]*snapshot.Process, o Options) []Action {
	if o.Cgroups == nil {
		return acts
	}
	ended := map[int]bool{}
	for _, t := range (Plan{Actions: acts}).Targets() {
		ended[t.PID] = true
	}
	killed := map[string]bool{}
	var sweeps []Action
	for i := range acts {
		a := &acts[i]
		p := procs[a.Process.PID]
		if p == nil || (a.Step != StepFreeze && a.Step != StepTerminate) {
			continue
		}
		cg, members := o.Cgroups(p)
		switch {
		case cg == "" || slices.ContainsFunc(members, func(pid int) bool { return !ended[pid] }):
		case a.Step == StepFreeze && len(members) == 1:
			a.Cgroup = cg
			a.Why = "its cgroup " + cg + " holds it alone: frozen, so that nothing it does races the kills"
		case a.Step == StepTerminate && len(members) > 1 && !killed[cg]:
			killed[cg] = true
			k := *a
			k.Step, k.Cgroup = StepKillCgroup, cg
			k.Why = fmt.Sprintf("its cgroup %s escaped its job and holds only leftovers (%d processes): cgroup.kill ends what is left of them", cg, len(members))
			sweeps = append(sweeps, k)
		}
	}
	return append(acts, sweeps...)
}
