package diff

import (
	"cmp"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// The triage classes say what a finding's process is, for the operator who
// must act on it (docs/triage.md has the runbook of each).
const (
	ClassExpected            = "expected"             // the allow list has it
	ClassTenant              = "tenant"               // the tenant's own, still running in its job
	ClassAnotherTenant       = "another_tenant"       // its cgroup names another job, pod or container
	ClassLeftoverWorker      = "leftover_worker"      // orphaned, or outliving its job, with no sign that it lies
	ClassZombieContext       = "zombie_context"       // GPU memory or an NVML entry with no live process behind it
	ClassUnkillable          = "unkillable"           // in D state, where kill -9 will not end it
	ClassSuspectedCompromise = "suspected_compromise" // a sign that it lies, such as masquerade, a foreign binary in a system path, egress to a pool
)

// Classes are the triage classes, from the one that asks the most of an
// operator to the least. --fail-on and the metrics' class label take them.
var Classes = []string{ClassSuspectedCompromise, ClassUnkillable, ClassZombieContext, ClassLeftoverWorker,
	ClassAnotherTenant, ClassTenant, ClassExpected}

// Triage is the verdict on a finding's process, with its class, the evidence
// that decided it, one line an operator can act on, and the row of the
// decision table (docs/triage.md) that chose them, a short id that stays
// the same across releases so tools can act on it.
type Triage struct {
	Class string   `json:"class"`
	Why   []string `json:"why"`
	Next  string   `json:"next"`
	Rule  string   `json:"rule"`
	// Owner is whom to ask about the process, the job, pod or container
	// the owner rule vouches for, else its user. "" with no process.
	Owner string `json:"owner,omitempty"`
}

// attachTriage gives every finding about a process (and every zombie or
// orphan finding) its verdict, after the allow list has had its say. A
// persistence finding about a process judged a compromise is high.
func (c *comparison) attachTriage(findings []Finding) {
	tenant := cmp.Or(c.to.Tenant, c.from.Tenant)
	var members map[string]string
	for i := range findings {
		f := &findings[i]
		if f.Process == nil && !ruleFor(f.Kind).WithoutProcess {
			continue
		}
		if members == nil {
			members = tenantMembers(tenant, c.snapshots()...)
		}
		t := classify(c.triageInput(f, tenant, members))
		f.Triage = &t
		if f.Kind == KindPersistence && t.Class == ClassSuspectedCompromise {
			f.Severity = max(f.Severity, High)
		}
	}
}

// snapshots are FROM, TO and the history, where processes are looked up.
func (c *comparison) snapshots() []*snapshot.Snapshot {
	return append([]*snapshot.Snapshot{c.from, c.to}, c.opts.History...)
}

// triageInput gathers what classify weighs about f.
func (c *comparison) triageInput(f *Finding, tenant string, members map[string]string) triageInput {
	in := triageInput{finding: f, tenant: tenant, member: members, jobEnded: c.opts.JobEnded}
	if f.Process == nil || ruleFor(f.Kind).WithoutProcess {
		in.holders = c.nodeHolders(f.GPUUUID)
		in.unread = len(c.toUnread)
	}
	if f.Process == nil {
		return in
	}
	id := idOf(f.Process.PID, f.Process.StartTime)
	in.proc, in.before = c.toByKey[id], c.fromByKey[id]
	if in.proc == nil {
		return in
	}
	p := in.proc
	in.mpsClients = c.mpsClients(p)
	in.signs = c.signContext(p, tenant)
	in.sources = persistenceSources(p)
	in.restarter = c.restarter(p)
	in.returned = c.binaryReturns(p)
	in.reparented = c.reparentedWhy(p, in.before)
	return in
}

// triageInput is what classify weighs.
type triageInput struct {
	finding *Finding
	proc    *snapshot.Process // at TO, nil when the process is gone
	before  *snapshot.Process // the same process at FROM, or nil
	tenant  string
	member  map[string]string // the tenant's processes by PID@START, with why
	// jobEnded says the tenant's job has ended (Options.JobEnded).
	jobEnded bool
	// mpsClients are proc's live MPS clients at TO, where it is an MPS server.
	mpsClients []*snapshot.Process
	signs      signContext
	// sources are what starts proc again (its unit, a timer, cron or atd),
	// restarter a live ancestor that did, returned the lines saying its
	// binary came back under a new process.
	sources    []source
	restarter  *restarter
	returned   []string
	reparented string // how proc lost the parent that started it and since when, "" when it did not
	// holders are, for a finding with no process, the live processes that
	// hold or map its GPU's node at TO. unread counts the processes at TO
	// that could not be read in full.
	holders []nodeHolder
	unread  int
}

// classify is the one function that decides a finding's triage. The first
// row of triageTable whose test holds gives it.
func classify(in triageInput) Triage {
	fs := newFacts(in)
	for _, row := range triageTable {
		if row.holds(fs) {
			t := row.verdict(fs)
			t.Rule = row.id
			if t.Owner == "" && !fs.noProcess {
				t.Owner = fs.toAsk()
			}
			return t
		}
	}
	panic("triage: no row of the decision table holds") // its last row always holds
}

// HostTriage gives the verdict on each live process of s that uses a GPU,
// outside any diff (gpusnap ps). It is classify's, with no tenant and no FROM,
// and with what only the whole host tells (the live clients an MPS server serves).
func HostTriage(s *snapshot.Snapshot) func(*snapshot.Process) Triage {
	c := newComparison(nothingAllowed(s), s, Options{}, false)
	c.check = true
	return func(p *snapshot.Process) Triage {
		ref := processRef(p)
		f := Finding{Kind: KindUnexpectedGPUProcess, Summary: describe(ref) + " uses a GPU", Process: ref}
		return classify(c.triageInput(&f, "", nil))
	}
}

// ownerText names the job, pod or container p's cgroup belongs to, where
// the owner rule vouches for it (snapshot.Process.VerifiedOwner), or "".
func ownerText(p *snapshot.Process) string {
	if id := p.VerifiedOwner(snapshot.OwnerSlurmJob); id != "" {
		return "slurm job " + id
	}
	if id := p.VerifiedOwner(snapshot.OwnerPod); id != "" {
		return "pod " + id
	}
	if id := p.VerifiedOwner(snapshot.OwnerContainer); id != "" {
		return "container " + snapshot.ShortContainerID(id)
	}
	return ""
}

// systemService reports whether p runs as a unit of the system's manager (a
// .service outside any user's manager). systemd started it, and it has no
// parent to lose.
func systemService(p *snapshot.Process) bool {
	return strings.HasSuffix(p.SystemdUnit, ".service") && !strings.HasPrefix(p.SystemdUnit, "user@") && !p.UnderUserManager()
}
