package diff

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/gpusnap/gpusnap/provenance"
	"github.com/gpusnap/gpusnap/snapshot"
)

// Triage classes: what a finding's process is, for the operator who must act
// on it (docs/triage.md has the runbook of each).
const (
	ClassExpected            = "expected"             // the allow list has it
	ClassTenant              = "tenant"               // the tenant's own, still running in its job
	ClassAnotherTenant       = "another_tenant"       // its cgroup names another job, pod or container
	ClassLeftoverWorker      = "leftover_worker"      // orphaned, or outliving its job, with no sign of masquerade
	ClassZombieContext       = "zombie_context"       // GPU memory or an NVML entry with no live process behind it
	ClassUnkillable          = "unkillable"           // in D state: kill -9 will not end it
	ClassSuspectedCompromise = "suspected_compromise" // masquerade, a foreign binary in a system path, egress to a pool
)

// Triage is the verdict on a finding's process: its class, the evidence
// that decided it, one line an operator can act on, and the row of the
// decision table (docs/triage.md) that chose them, a short id that stays
// the same across releases so tools can act on it.
type Triage struct {
	Class string   `json:"class"`
	Why   []string `json:"why"`
	Next  string   `json:"next"`
	Rule  string   `json:"rule"`
}

// attachTriage gives every finding about a process (and every zombie or
// orphan finding) its verdict, after the allow list has had its say.
func (c *comparison) attachTriage(findings []Finding) {
	tenant := cmp.Or(c.to.Tenant, c.from.Tenant)
	var members map[string]string
	for i := range findings {
		f := &findings[i]
		if f.Process == nil && !RuleOf(f.Kind).withoutProcess() {
			continue
		}
		if members == nil {
			members = tenantMembers(tenant, append([]*snapshot.Snapshot{c.from, c.to}, c.opts.History...)...)
		}
		var p, before *snapshot.Process
		if f.Process != nil {
			id := idOf(f.Process.PID, f.Process.StartTime)
			p, before = c.toByKey[id], c.fromByKey[id]
		}
		in := triageInput{finding: f, proc: p, before: before, tenant: tenant, member: members}
		if p != nil {
			in.mpsClients = c.mpsClients(p)
		}
		t := classify(in)
		f.Triage = &t
	}
}

// triageInput is what classify weighs.
type triageInput struct {
	finding *Finding
	proc    *snapshot.Process // at TO; nil when the process is gone
	before  *snapshot.Process // the same process at FROM, or nil
	tenant  string
	member  map[string]string // the tenant's processes by PID@START, with why
	// mpsClients are proc's live MPS clients at TO, where it is an MPS server.
	mpsClients []*snapshot.Process
}

// classify is the one function that decides a finding's triage class. The
// order is the operator's: what no kill can fix first (memory without a
// process, D state is checked after compromise, which changes what to keep),
// then evidence of compromise, then ownership.
func classify(in triageInput) Triage {
	f, p := in.finding, in.proc
	if p == nil && (f.Process == nil || RuleOf(f.Kind).withoutProcess()) {
		return Triage{Class: ClassZombieContext, Rule: "zombie-no-holder", Why: []string{f.Summary}, Next: zombieNext(f)}
	}
	if p != nil && p.Defunct() {
		return Triage{Class: ClassZombieContext, Rule: "defunct", Why: []string{fmt.Sprintf("pid %d is defunct (state %s): it runs nothing, its context is the driver's", p.PID, p.State)},
			Next: fmt.Sprintf("reap it (kill its parent %d) or drain the node and reset the GPU", p.PPID)}
	}
	if p == nil { // gone since: judge what the record says of it
		p = &snapshot.Process{PID: f.Process.PID, StartTime: f.Process.StartTime, Comm: f.Process.Comm, Exe: f.Process.Exe, ExeDeleted: f.Process.ExeDeleted}
	}
	if why := compromiseSigns(p); len(why) > 0 {
		return Triage{Class: ClassSuspectedCompromise, Rule: "compromise", Why: why,
			Next: fmt.Sprintf("contain the node: drain it, keep the evidence (gpusnap bundle) and capture pid %d's memory before killing it", p.PID)}
	}
	if p.State == "D" {
		return Triage{Class: ClassUnkillable, Rule: "unkillable", Why: []string{fmt.Sprintf("pid %d is in D state (uninterruptible wait in %s)", p.PID, cmp.Or(p.Wchan, "an unknown kernel function"))},
			Next: fmt.Sprintf("drain the node and reboot it: kill -9 %d will not end a process in D state", p.PID)}
	}
	if f.Allowed != "" {
		return Triage{Class: ClassExpected, Rule: "expected", Why: []string{"allowed by " + f.Allowed}, Next: "none: an expected workload"}
	}
	t := ownership(in, p)
	if p.MPSServer() && in.proc != nil {
		t = mpsServerTriage(t, in, p)
	}
	return t
}

// ownership is the verdict by whose process p is: the tenant's, another
// tenant's, or a worker that outlived its job.
func ownership(in triageInput, p *snapshot.Process) Triage {
	reparented := reparentedWhy(p, in.before)
	if why, ok := in.member[p.Key()]; ok {
		if reparented != "" {
			return leftover(p, "leftover-reparented", []string{why, reparented})
		}
		return Triage{Class: ClassTenant, Rule: "tenant", Why: []string{why},
			Next: fmt.Sprintf("the tenant's own: let its job end, or kill -9 %d if the job has ended", p.PID)}
	}
	owner := ownerText(p)
	if in.tenant != "" && p.SelfNamedCgroup() {
		// A tenant can name its own cgroup for another's job: no verdict
		// of whose it is rests on that.
		owner = ""
	}
	switch {
	case owner != "" && in.tenant != "":
		return Triage{Class: ClassAnotherTenant, Rule: "another-tenant", Why: []string{"its cgroup names " + owner + ", not tenant " + in.tenant},
			Next: "ask the owner of " + owner + " to confirm it; no page"}
	case owner != "" && reparented == "":
		// No tenant asked about (gpusnap ps): the job's own is a tenant's.
		return Triage{Class: ClassTenant, Rule: "job-own", Why: []string{"its cgroup names " + owner},
			Next: owner + "'s own: let it end, or ask its owner"}
	}
	why := []string{"no masquerade evidence, no packaging problem, no egress to a mining pool"}
	if reparented != "" {
		return leftover(p, "leftover-reparented", append([]string{reparented}, why...))
	}
	return leftover(p, "leftover-unowned", why)
}

// leftover is the verdict on a worker that outlived its job, by rule.
func leftover(p *snapshot.Process, rule string, why []string) Triage {
	user := cmp.Or(p.User, fmt.Sprintf("uid %d", p.UID))
	return Triage{Class: ClassLeftoverWorker, Rule: rule, Why: why,
		Next: fmt.Sprintf("kill -9 %d (%s, %s): it outlived its job", p.PID, p.Comm, user)}
}

// reparentedWhy says how p lost the parent that started it, or "".
func reparentedWhy(p, before *snapshot.Process) string {
	switch {
	case before != nil && before.PPID != p.PPID:
		return fmt.Sprintf("reparented: its parent was %d at FROM, is %d now", before.PPID, p.PPID)
	case p.Reparented:
		return fmt.Sprintf("reparented: its parent is %d, outside the session its job started it in", p.PPID)
	}
	return ""
}

// ownerText names the job, pod or container p's cgroup belongs to, or "".
func ownerText(p *snapshot.Process) string {
	switch {
	case p.SlurmJobID != "":
		return "slurm job " + p.SlurmJobID
	case p.PodUID != "":
		return "pod " + p.PodUID
	case p.ContainerID != "":
		return "container " + snapshot.ShortContainerID(p.ContainerID)
	}
	return ""
}

// systemDirs are where only packages install executables.
var systemDirs = []string{"/usr/bin/", "/usr/sbin/", "/bin/", "/sbin/", "/usr/lib/", "/lib/", "/usr/libexec/"}

// compromiseSigns lists the evidence that p is not what it claims to be:
// masquerade, a binary in a system path that no package installed or that
// differs from its package's, a connection to a mining-pool port.
func compromiseSigns(p *snapshot.Process) []string {
	signs := masquerade(p)
	if pk := p.Package; pk != nil {
		system := false
		for _, d := range systemDirs {
			system = system || strings.HasPrefix(p.Exe, d)
		}
		switch {
		case pk.Status == provenance.Modified:
			signs = append(signs, fmt.Sprintf("exe %s differs from package %s's file (dpkg md5sums)", p.Exe, pk.Name))
		case pk.Status == provenance.NotPackaged && system:
			signs = append(signs, fmt.Sprintf("exe %s lies in a system directory, yet no package installed it", p.Exe))
		}
	}
	for _, s := range p.Sockets {
		if s.Peer() && miningPoolPorts[s.RemotePort()] {
			signs = append(signs, fmt.Sprintf("%s connection to %s: a mining-pool port", s.Proto, s.Remote))
		}
	}
	return signs
}

// HostTriage gives the verdict on each live process of s that uses a GPU,
// outside any diff (gpusnap ps): classify's, with no tenant and no FROM, and
// with what only the whole host tells (the live clients an MPS server serves).
func HostTriage(s *snapshot.Snapshot) func(*snapshot.Process) Triage {
	c := newComparison(nothingAllowed(s), s, Options{}, false)
	c.check = true
	return func(p *snapshot.Process) Triage {
		ref := processRef(p)
		f := Finding{Kind: KindUnexpectedGPUProcess, Summary: describe(ref) + " uses a GPU", Process: ref}
		return classify(triageInput{finding: &f, proc: p, mpsClients: c.mpsClients(p)})
	}
}
