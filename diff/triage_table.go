package diff

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// triageRow is one row of the decision table docs/triage.md writes out (a
// test holds the doc to it). classify gives the verdict of the first row
// whose test holds. id is Triage.Rule, and class and when are the doc's words.
type triageRow struct {
	id, class, when string
	holds           func(*facts) bool
	verdict         func(*facts) Triage
}

// triageTable is the decision table, in the operator's order. It takes what no
// kill fixes (memory without a process, a defunct one), then a sign that it
// lies (which changes what to keep), D state, the allow list, whose it is, what
// starts it again, and last a worker that outlived its job.
var triageTable = []triageRow{
	{"zombie-no-holder", ClassZombieContext, "GPU memory, an NVML entry or GPU work with no live process behind it, and no live process seen holding or mapping that GPU's node",
		func(f *facts) bool { return f.noProcess && len(f.in.holders) == 0 }, zombieReset},
	{"zombie-live-holders", ClassZombieContext, "the same, and processes the allow list does not name hold or map the GPU's node",
		func(f *facts) bool { return f.noProcess && f.unallowedHolders() != "" }, zombieKillHolders},
	{"zombie-allowed-holders", ClassZombieContext, "the same, and only processes the allow list names hold or map the GPU's node",
		func(f *facts) bool { return f.noProcess }, zombieAllowedHolders},
	{"defunct", ClassZombieContext, "the process is defunct (exited, not reaped)",
		func(f *facts) bool { return f.p.Defunct() }, defunctVerdict},
	{"compromise-persistent", ClassSuspectedCompromise, "a sign that it lies (Compromise signs), and something starts it again",
		func(f *facts) bool { return len(f.lies) > 0 && f.source() != "" }, compromise},
	{"compromise", ClassSuspectedCompromise, "a sign that it lies (Compromise signs)",
		func(f *facts) bool { return len(f.lies) > 0 }, compromise},
	{"unkillable", ClassUnkillable, "it is in D state",
		func(f *facts) bool { return f.p.State == "D" }, unkillable},
	{"expected", ClassExpected, "the allow list names it",
		func(f *facts) bool { return f.in.finding.Allowed != "" }, expected},
	{"mps-serving", "its clients' owner's: `tenant`, `another_tenant`", "CUDA MPS's server, serving live MPS clients",
		func(f *facts) bool { return f.mpsServer() && len(f.in.mpsClients) > 0 }, mpsServing},
	{"tenant", ClassTenant, "the tenant's (its own or an ancestor's cgroup names the tenant), still where its job started it",
		func(f *facts) bool { return f.member != "" && f.in.reparented == "" && !f.in.jobEnded }, tenantOwn},
	{"another-tenant", ClassAnotherTenant, "its own cgroup names another job, pod or container than the tenant's, and only root can make that cgroup",
		func(f *facts) bool { return f.in.tenant != "" && f.member == "" && f.owner != "" }, anotherTenant},
	{"job-own", ClassTenant, "no tenant asked about (`gpusnap ps`), and its own cgroup names a job, pod or container that only root can make",
		func(f *facts) bool { return f.in.tenant == "" && f.owner != "" && f.in.reparented == "" }, jobOwn},
	{"persistence-unit", ClassLeftoverWorker, "its systemd unit restarts it (`Restart=`) or a timer starts it",
		func(f *facts) bool { return len(f.in.sources) > 0 && f.in.sources[0].unit != "" }, persistenceUnit},
	{"persistence-scheduler", ClassLeftoverWorker, "it descends from cron or atd",
		func(f *facts) bool { return len(f.in.sources) > 0 }, persistenceScheduler},
	{"persistence-ancestor", ClassLeftoverWorker, "a live ancestor of its user (not a session leader, a login shell or the job's step daemon) started a GPU-using process with its exe or command line before",
		func(f *facts) bool { return f.in.restarter != nil }, persistenceAncestor},
	{"persistence-returned", ClassLeftoverWorker, "its binary used a GPU under an earlier process, gone since, or before a reboot, and gpusnap saw nothing that starts it",
		func(f *facts) bool { return len(f.in.returned) > 0 }, persistenceReturned},
	{"mps-idle", ClassLeftoverWorker, "CUDA MPS's server, serving no live client",
		func(f *facts) bool { return f.mpsServer() }, mpsIdle},
	{"job-ended", ClassLeftoverWorker, "the tenant's, and the tenant's job has ended (`--job-ended`: an epilog)",
		func(f *facts) bool { return f.member != "" && f.in.jobEnded }, jobEnded},
	{"service", ClassLeftoverWorker, "it runs as a unit of the system's manager that does not restart it",
		func(f *facts) bool { return systemService(f.p) && f.in.reparented == "" }, service},
	{"leftover-reparented", ClassLeftoverWorker, "it left the session its job started it in and its parent exited: init or a subreaper adopted it",
		func(f *facts) bool { return f.in.reparented != "" }, leftoverReparented},
	{"leftover-unowned", ClassLeftoverWorker, "none of the above: nothing vouches for it, and nothing seen says it lies",
		func(*facts) bool { return true }, leftoverUnowned},
}

// facts are what the rows read of a triageInput, worked out once.
type facts struct {
	in        triageInput
	noProcess bool              // the finding has no live or recorded process (zombie memory, an orphan entry)
	p         *snapshot.Process // the process at TO, or the record of one gone since
	lies      []string          // compromiseSigns' signs
	notes     []string          // compromiseSigns' notes
	member    string            // why it is the tenant's, or ""
	owner     string            // the job, pod or container its own root-made cgroup names, or ""
	user      string            // its user, for next
}

func newFacts(in triageInput) *facts {
	f := in.finding
	fs := &facts{in: in, p: in.proc}
	if fs.p == nil && (f.Process == nil || ruleFor(f.Kind).WithoutProcess) {
		fs.noProcess = true
		return fs
	}
	if fs.p == nil { // gone since, so judge what the record says of it
		fs.p = &snapshot.Process{PID: f.Process.PID, StartTime: f.Process.StartTime, Comm: f.Process.Comm, Exe: f.Process.Exe, ExeDeleted: f.Process.ExeDeleted,
			UID: f.Process.UID, User: f.Process.User}
	}
	p := fs.p
	fs.lies, fs.notes = compromiseSigns(p, in.signs)
	fs.member = in.member[p.Key()]
	fs.owner = ownerText(p) // only an owner the owner rule vouches for
	fs.user = snapshot.UserText(p.User, p.UID)
	return fs
}

// source names what starts the process again, for next, or "".
func (f *facts) source() string {
	switch {
	case len(f.in.sources) > 0:
		return f.in.sources[0].stop
	case f.in.restarter != nil:
		return f.in.restarter.stop
	}
	return ""
}

// toAsk is whom to ask about the process, its vouched-for owner, else its
// user by name, else by uid.
func (f *facts) toAsk() string {
	if f.owner != "" {
		return f.owner
	}
	if f.p.User != "" {
		return "user " + f.p.User
	}
	return f.user
}

func (f *facts) mpsServer() bool { return f.p.MPSServer() && f.in.proc != nil }

// why is the evidence that decided the verdict, then the notes of evidence
// that decided nothing.
func (f *facts) why(lines ...string) []string { return append(lines, f.notes...) }

func (f *facts) kill() string {
	return fmt.Sprintf("kill -9 %d (%s, %s)", f.p.PID, f.p.Comm, f.user)
}

func zombieReset(f *facts) Triage {
	why := []string{f.in.finding.Summary, "no live process seen holding or mapping its GPU's node"}
	if f.in.unread > 0 {
		why = append(why, count(f.in.unread, "process")+" could not be read in full: one may hold it")
	}
	return Triage{Class: ClassZombieContext, Why: why, Next: zombieNext(f.in.finding)}
}

func zombieKillHolders(f *facts) Triage {
	gpu := f.in.holders[0].gpu
	return Triage{Class: ClassZombieContext, Why: append([]string{f.in.finding.Summary}, holderLines(f.in.holders)...),
		Next: fmt.Sprintf("kill the holders the allow list does not name (kill -9 %s), run gpusnap check --gpus %s again, and reset the GPU (nvidia-smi -r -i %s) only if memory is still held and nothing holds its node",
			f.unallowedHolders(), gpu, gpu)}
}

func zombieAllowedHolders(f *facts) Triage {
	gpu := f.in.holders[0].gpu
	return Triage{Class: ClassZombieContext, Why: append([]string{f.in.finding.Summary}, holderLines(f.in.holders)...),
		Next: fmt.Sprintf("drain the node; stop the allowed holders of GPU %s at a quiet time, run gpusnap check --gpus %s again, and reset the GPU (nvidia-smi -r -i %s) only if memory is still held and nothing holds its node",
			gpu, gpu, gpu)}
}

func defunctVerdict(f *facts) Triage {
	p := f.p
	return Triage{Class: ClassZombieContext, Why: f.why(fmt.Sprintf("pid %d is defunct (state %s): it runs nothing, its context is the driver's", p.PID, p.State)),
		Next: fmt.Sprintf("reap it (kill its parent %d) or drain the node and reset the GPU", p.PPID)}
}

func compromise(f *facts) Triage {
	next := fmt.Sprintf("contain the node: drain it, keep the evidence (gpusnap bundle) and capture pid %d's memory before killing it", f.p.PID)
	if src := f.source(); src != "" {
		next += "; stop what starts it first (" + src + "), or it comes back"
	}
	return Triage{Class: ClassSuspectedCompromise, Why: f.why(append(f.lies, f.sourceLines()...)...), Next: next}
}

func unkillable(f *facts) Triage {
	p := f.p
	return Triage{Class: ClassUnkillable, Why: f.why(fmt.Sprintf("pid %d is in D state (uninterruptible wait in %s)", p.PID, cmp.Or(p.Wchan, "an unknown kernel function"))),
		Next: fmt.Sprintf("drain the node and reboot it: kill -9 %d will not end a process in D state", p.PID)}
}

func expected(f *facts) Triage {
	return Triage{Class: ClassExpected, Why: f.why("allowed by " + f.in.finding.Allowed), Next: "none: an expected workload"}
}

func tenantOwn(f *facts) Triage {
	t := Triage{Class: ClassTenant, Why: f.why(f.member),
		Next: fmt.Sprintf("the tenant's own: let its job end, or kill -9 %d if the job has ended", f.p.PID)}
	return mpsNote(t, f)
}

func anotherTenant(f *facts) Triage {
	t := Triage{Class: ClassAnotherTenant, Why: f.why("its cgroup names " + f.owner + ", not tenant " + f.in.tenant),
		Next: "ask the owner of " + f.owner + " to confirm it; no page; the GPU stays refused to the next job while it runs"}
	return mpsNote(t, f)
}

func jobOwn(f *facts) Triage {
	t := Triage{Class: ClassTenant, Why: f.why("its cgroup names " + f.owner), Next: f.owner + "'s own: let it end, or ask its owner"}
	return mpsNote(t, f)
}

func persistenceUnit(f *facts) Triage {
	return leftoverVerdict(f, f.sourceLines(), "stop its source first ("+f.source()+"), then "+f.kill()+": a kill alone will not end it")
}

func persistenceScheduler(f *facts) Triage {
	return leftoverVerdict(f, f.sourceLines(), "stop its source first ("+f.source()+"), then "+f.kill()+": a kill alone will not end it")
}

func persistenceAncestor(f *facts) Triage {
	return leftoverVerdict(f, f.sourceLines(), "stop its source first ("+f.source()+"), then "+f.kill()+": a kill alone will not end it")
}

func persistenceReturned(f *facts) Triage {
	return leftoverVerdict(f, f.in.returned, "find what starts it before the kill (systemctl list-timers, every user's crontab, @reboot lines, a container's restart policy), then "+f.kill()+": it came back before")
}

func mpsServing(f *facts) Triage {
	t := Triage{Class: ClassLeftoverWorker}
	return mpsServerTriage(t, f.in, f.p)
}

func mpsIdle(f *facts) Triage {
	t := leftoverVerdict(f, nil, "")
	if f.in.reparented != "" {
		t.Why = append(t.Why, f.in.reparented)
	}
	return mpsServerTriage(t, f.in, f.p)
}

func service(f *facts) Triage {
	return leftoverVerdict(f, []string{fmt.Sprintf("it runs as system service %s (its unit does not restart it): systemd started it, it lost no parent", f.p.SystemdUnit)},
		fmt.Sprintf("systemctl stop %s, or allow-list it if the host needs it", f.p.SystemdUnit))
}

func leftoverReparented(f *facts) Triage {
	var why []string
	if f.member != "" {
		why = append(why, f.member)
	}
	return leftoverVerdict(f, append(why, f.in.reparented), f.kill()+": it outlived its job")
}

func jobEnded(f *facts) Triage {
	why := []string{f.member, "the tenant's job has ended: what it still runs outlived it"}
	if f.in.reparented != "" {
		why = append(why, f.in.reparented)
	}
	return leftoverVerdict(f, why, f.kill()+": it outlived its job")
}

func leftoverUnowned(f *facts) Triage {
	why := append(f.p.OwnerDoubts(), f.seen())
	return leftoverVerdict(f, why, f.kill()+": it outlived its job")
}

// leftoverVerdict is a leftover worker's verdict with why and next.
func leftoverVerdict(f *facts, why []string, next string) Triage {
	return Triage{Class: ClassLeftoverWorker, Why: f.why(why...), Next: next}
}

// seen says what gpusnap read of the process and found no sign in. That is
// the evidence, never an absence of what it could not read.
func (f *facts) seen() string {
	read := "its name and exe"
	if f.in.proc != nil {
		read += " and " + count(len(f.p.Sockets), "internet socket")
	}
	if f.p.Package == nil {
		read += " (its package unchecked)"
	}
	seen := "no sign that it lies seen in " + read
	if socketsUnread(f.p) {
		seen += "; its sockets were not all read: egress not known"
	} else if slices.ContainsFunc(f.p.Sockets, func(s snapshot.Socket) bool { return strings.HasPrefix(s.Proto, "udp") && !s.Peer() }) {
		seen += "; an unconnected UDP socket sends where sendto says, which no table shows: egress not known"
	}
	return seen
}

// sourceLines are the evidence lines of what starts the process again.
func (f *facts) sourceLines() []string {
	var out []string
	for _, s := range f.in.sources {
		out = append(out, s.why)
	}
	if r := f.in.restarter; r != nil {
		out = append(out, r.why)
	}
	return out
}

// unallowedHolders are the PIDs of the holders the allow list does not
// name, as kill's arguments, or "".
func (f *facts) unallowedHolders() string {
	var pids []string
	for _, h := range f.in.holders {
		if !h.allowed {
			pids = append(pids, fmt.Sprint(h.proc.PID))
		}
	}
	return strings.Join(pids, " ")
}
