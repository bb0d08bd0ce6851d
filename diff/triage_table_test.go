package diff

import (
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/provenance"
	"github.com/gpusnap/gpusnap/snapshot"
)

// docTable reads the rows of the table under heading in docs/triage.md, as
// each row's cells with backquotes kept.
func docTable(t *testing.T, heading string) [][]string {
	t.Helper()
	data, err := os.ReadFile("../docs/triage.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("docs/triage.md has no section %q", heading)
	}
	rest, _, _ = strings.Cut(rest, "\n## ")
	var rows [][]string
	for line := range strings.SplitSeq(rest, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		var cells []string
		for c := range strings.SplitSeq(strings.Trim(line, "|"), " | ") {
			cells = append(cells, strings.ReplaceAll(strings.TrimSpace(c), `\|`, "|"))
		}
		rows = append(rows, cells)
	}
	return rows
}

// The decision table in docs/triage.md is the code's, row by row, with the
// same ids in the same order, each with the code's class and words.
func TestDecisionTableIsTheDoc(t *testing.T) {
	rows := docTable(t, "Decision table")
	if len(rows) != len(triageTable) {
		t.Errorf("docs/triage.md has %d rows, the code %d", len(rows), len(triageTable))
	}
	classRe := regexp.MustCompile("^`[a-z_]+`$")
	for i, row := range triageTable {
		if i >= len(rows) {
			break
		}
		want := []string{"`" + row.id + "`", row.class, row.when}
		if classRe.MatchString("`" + row.class + "`") {
			want[1] = "`" + row.class + "`"
		}
		if got := rows[i][:3]; !slices.Equal(got, want) {
			t.Errorf("row %d: docs/triage.md has\n  %q\nthe code\n  %q", i+1, got, want)
		}
	}
	signs := docTable(t, "Compromise signs")
	if len(signs) != len(compromiseRules) {
		t.Errorf("docs/triage.md has %d compromise signs, the code %d", len(signs), len(compromiseRules))
	}
	for i, r := range compromiseRules {
		if want := []string{"`" + r.id + "`", r.sign, r.note}; i < len(signs) && !slices.Equal(signs[i], want) {
			t.Errorf("compromise sign %d: docs/triage.md has\n  %q\nthe code\n  %q", i+1, signs[i], want)
		}
	}
}

// triageCase is a diff whose finding of kind (the first, or about pid)
// must be decided by row rule, with next and why naming what they must.
type triageCase struct {
	rule     string
	from, to *snapshot.Snapshot
	history  []*snapshot.Snapshot
	allow    string
	kind     string
	pid      int
	host     bool // judged as gpusnap ps judges TO's process pid, with no diff
	jobEnded bool // diffed with Options.JobEnded
	next     []string
	why      []string
}

// py is a GPU-using python process, and gpuProc any GPU-using process.
func gpuProc(pid int, comm, exe string, opts ...procOpt) snapshot.Process {
	return proc(pid, 5, comm, exe, append([]procOpt{mapping(dev0, "rw-s", 0x7f0000000000, 1<<20, 0, dev0No)}, opts...)...)
}

func set(f func(*snapshot.Process)) procOpt { return f }

func tenantSnap(id, tenant string, procs ...snapshot.Process) *snapshot.Snapshot {
	s := snap(id, procs...)
	s.Tenant = tenant
	return s
}

// triageCases holds a case for every row of the decision table.
func triageCases() []triageCase {
	job := func(id string) procOpt {
		return set(func(p *snapshot.Process) {
			p.SlurmJobID = id
			p.Cgroups = []string{"0::/system.slice/slurmstepd.scope/job_" + id + "/step_0/user/task_0"}
		})
	}
	py := func(pid int, opts ...procOpt) snapshot.Process {
		return gpuProc(pid, "python3", "/usr/bin/python3.11", opts...)
	}
	idle := func(used uint64) *snapshot.Snapshot { return withGPUs(tenantSnap("from", "4242"), gpu(used)) }
	parent := proc(600, 4, "bash", "/usr/bin/bash", set(func(p *snapshot.Process) { p.Session, p.PGID = 500, 600 }))
	child := func(pid int) snapshot.Process {
		return py(pid, set(func(p *snapshot.Process) {
			p.PPID, p.Cmdline = 600, []string{"python3", "miner.py"}
			p.Ancestry = []snapshot.Ancestor{{PID: 600, StartTime: 4, Comm: "bash"}}
		}))
	}
	earlier := tenantSnap("mid", "4242", parent, child(601))
	earlier.Host.CaptureStart = t0.Add(-time.Minute)
	moved := tenantSnap("mid", "4242", py(19, set(func(p *snapshot.Process) { p.PPID = 4200 })))
	moved.Host.CaptureStart = t0.Add(-time.Minute)
	persistenced := proc(50, 3, "nvidia-persiste", "/usr/bin/nvidia-persistenced", holder(3, dev0, "rw", dev0No))
	leftHolder := proc(51, 3, "python3", "/usr/bin/python3.11", holder(3, dev0, "rw", dev0No))
	server := mpsServer(900)
	client := proc(901, 700, "python3", "/usr/bin/python3.11", holder(3, ctl, "rw", ctlNo), job("4242"))
	return []triageCase{
		{rule: "zombie-no-holder", from: idle(1 << 30), to: withGPUs(tenantSnap("to", "4242"), gpu(40<<30)), kind: KindZombieGPUMemory,
			next: []string{"nothing to kill", "nvidia-smi -r -i N"}, why: []string{"no live process seen holding or mapping its GPU's node"}},
		{rule: "zombie-live-holders", from: withGPUs(tenantSnap("from", "4242", persistenced), gpu(1<<30)), to: withGPUs(tenantSnap("to", "4242", persistenced, leftHolder), gpu(40<<30)),
			allow: "exe=/usr/bin/nvidia-persistenced\n", kind: KindZombieGPUMemory,
			next: []string{"kill -9 51)", "gpusnap check --gpus 0 again", "only if memory is still held and nothing holds its node"},
			why:  []string{"51@3 (python3, exe /usr/bin/python3.11) holds or maps /dev/nvidia0", "50@3 (nvidia-persiste", "; allowed"}},
		{rule: "zombie-allowed-holders", from: withGPUs(tenantSnap("from", "4242", persistenced), gpu(1<<30)), to: withGPUs(tenantSnap("to", "4242", persistenced), gpu(40<<30)),
			allow: "exe=/usr/bin/nvidia-persistenced\n", kind: KindZombieGPUMemory,
			next: []string{"stop the allowed holders of GPU 0", "reset the GPU (nvidia-smi -r -i 0) only if"}},
		{rule: "defunct", from: idle(1 << 30), to: withGPUs(tenantSnap("to", "4242", proc(30, 5, "python3", "", set(func(p *snapshot.Process) { p.State, p.Threads, p.PPID = "Z", 1, 29 }))), gpu(2<<30, gp(30, 1<<30))),
			kind: KindOrphanGPUProcess, next: []string{"reap it (kill its parent 29)"}},
		{rule: "compromise-persistent", from: idle(0), to: tenantSnap("to", "4242", gpuProc(10, "kworker/0:1", "/dev/shm/.x/kworker", set(func(p *snapshot.Process) {
			p.SystemdUnit, p.UnitRestart = "kworker.service", "always"
		}))), next: []string{"contain the node", "stop what starts it first (systemctl disable --now kworker.service)"},
			why: []string{"named like a kernel thread", "under /dev/shm", "Restart=always"}},
		{rule: "compromise", from: idle(0), to: tenantSnap("to", "4242", gpuProc(11, "python3", "/home/bob/.cache/x/python3")),
			next: []string{"contain the node"}, why: []string{"under hidden directory /home/bob/.cache"}},
		{rule: "unkillable", from: idle(0), to: tenantSnap("to", "4242", py(14, set(func(p *snapshot.Process) { p.State, p.Wchan = "D", "fuse_wait" }))),
			next: []string{"reboot it: kill -9 14 will not end"}, why: []string{"fuse_wait"}},
		{rule: "expected", from: idle(0), to: tenantSnap("to", "4242", py(15)), allow: "exe=/usr/bin/python3.11\n", next: []string{"none"}},
		{rule: "mps-serving", to: withGPUs(snap("to", server, client), mpsGPU(0, 28*mib, gp(901, 4<<30))), pid: 900, host: true,
			next: []string{"leave it while its clients run"}, why: []string{"its client 901 belongs to slurm job 4242"}},
		{rule: "tenant", from: idle(0), to: tenantSnap("to", "4242", py(16, job("4242"))), next: []string{"let its job end"}, why: []string{"slurm job 4242's"}},
		{rule: "job-ended", from: idle(0), to: tenantSnap("to", "4242", py(16, job("4242"))), jobEnded: true,
			next: []string{"kill -9 16 (python3, bob): it outlived its job"}, why: []string{"slurm job 4242's", "the tenant's job has ended"}},
		{rule: "another-tenant", from: idle(0), to: tenantSnap("to", "4242", py(18, job("77"))),
			next: []string{"ask the owner of slurm job 77 to confirm it; no page", "stays refused"}},
		{rule: "job-own", from: snap("from"), to: snap("to", py(22, job("77"))), next: []string{"slurm job 77's own"}},
		{rule: "persistence-unit", from: idle(0), to: tenantSnap("to", "4242", py(23, set(func(p *snapshot.Process) {
			p.SystemdUnit, p.UnitRestart, p.UnitTimer = "train.service", "always", "train.timer"
		}))), next: []string{"stop its source first (systemctl disable --now train.timer train.service), then kill -9 23"}},
		{rule: "persistence-scheduler", from: idle(0), to: tenantSnap("to", "4242", py(24, set(func(p *snapshot.Process) {
			p.Ancestry = []snapshot.Ancestor{{PID: 700, StartTime: 1, Comm: "sh"}, {PID: 690, StartTime: 1, Comm: "cron", Exe: "/usr/sbin/cron"}}
		}))), next: []string{"crontab -l -u bob", "then kill -9 24"}, why: []string{"descends from cron (pid 690)"}},
		{rule: "persistence-ancestor", from: idle(0), to: tenantSnap("to", "4242", parent, child(602)), history: []*snapshot.Snapshot{earlier}, pid: 602,
			next: []string{"kill -9 -- -600, its process group, or kill 600 (bash)", "then kill -9 602"},
			why:  []string{"its ancestor 600@4 (bash, bob) restarts it: it started pid 601 (python3), which used a GPU in snapshot mid"}},
		{rule: "persistence-returned", from: tenantSnap("from", "4242", py(400, set(func(p *snapshot.Process) { p.ExeSHA256, p.HashStatus = "ab12", snapshot.HashOK }))),
			to: tenantSnap("to", "4242", py(25, set(func(p *snapshot.Process) { p.ExeSHA256, p.HashStatus = "ab12", snapshot.HashOK }))), pid: 25,
			next: []string{"find what starts it before the kill"}, why: []string{"used a GPU as pid 400"}},
		{rule: "mps-idle", from: idle(0), to: tenantSnap("to", "4242", mpsServer(26)), next: []string{"echo quit | nvidia-cuda-mps-control"}},
		{rule: "service", from: idle(0), to: tenantSnap("to", "4242", py(27, set(func(p *snapshot.Process) {
			p.SystemdUnit, p.UnitRestart, p.Reparented = "infer.service", "no", true
		}))), next: []string{"systemctl stop infer.service"}, why: []string{"runs as system service infer.service"}},
		{rule: "leftover-reparented", from: idle(0), to: tenantSnap("to", "4242", py(19, set(func(p *snapshot.Process) { p.Reparented = true }))),
			history: []*snapshot.Snapshot{moved}, next: []string{"kill -9 19 (python3, bob)"},
			why: []string{"its parent was 4200 in snapshot mid (2026-11-29 19:59:00 UTC); since then init (pid 1) adopted it"}},
		{rule: "leftover-unowned", from: idle(0), to: tenantSnap("to", "4242", py(20, set(func(p *snapshot.Process) {
			p.SlurmJobID, p.Cgroups = "77", []string{"0::/user.slice/user-1000.slice/user@1000.service/job_77/x.scope"}
		}))), next: []string{"kill -9 20"}, why: []string{"below a systemd user manager, a subtree its user names", "no sign that it lies seen"}},
	}
}

// Each row of the decision table, on a diff that reaches it, gives the row's
// id, class, next and why, and no row goes without a case.
func TestDecisionTableRows(t *testing.T) {
	covered := map[string]bool{}
	for _, c := range triageCases() {
		covered[c.rule] = true
		opts := Options{ZombieThreshold: DefaultZombieThreshold, History: c.history, JobEnded: c.jobEnded}
		if c.allow != "" {
			al, err := ParseAllow(strings.NewReader(c.allow), "allow")
			if err != nil {
				t.Fatal(err)
			}
			opts.Allow = al
		}
		tr, kind := judge(c, opts)
		if tr == nil {
			t.Errorf("%s: no finding of kind %q about pid %d", c.rule, c.kind, c.pid)
			continue
		}
		row := rowByID(c.rule)
		why := strings.Join(tr.Why, "\n")
		classes := []string{row.class}
		if !slices.Contains(Classes, row.class) { // mps-serving takes its clients' owner's
			classes = []string{ClassTenant, ClassAnotherTenant}
		}
		if tr.Rule != c.rule || !slices.Contains(classes, tr.Class) {
			t.Errorf("%s: %s: rule %s class %s, want rule %s class %s\nwhy: %s", c.rule, kind, tr.Rule, tr.Class, c.rule, row.class, why)
		}
		for _, n := range c.next {
			if !strings.Contains(tr.Next, n) {
				t.Errorf("%s: next %q lacks %q", c.rule, tr.Next, n)
			}
		}
		for _, w := range c.why {
			if !strings.Contains(why, w) {
				t.Errorf("%s: why lacks %q:\n%s", c.rule, w, why)
			}
		}
	}
	for _, row := range triageTable {
		if !covered[row.id] {
			t.Errorf("row %s has no case", row.id)
		}
	}
}

// judge gives c's verdict, and the kind of the finding it is on.
func judge(c triageCase, opts Options) (*Triage, string) {
	if c.host {
		for i := range c.to.Processes {
			if p := &c.to.Processes[i]; p.PID == c.pid {
				t := HostTriage(c.to)(p)
				return &t, "ps"
			}
		}
		return nil, ""
	}
	f := pick(Compare(c.from, c.to, opts), c.kind, c.pid)
	if f == nil {
		return nil, ""
	}
	return f.Triage, f.Kind
}

// pick is the first finding of kind ("" any) about pid (0 any) with a triage.
func pick(r *Result, kind string, pid int) *Finding {
	for i := range r.Findings {
		f := &r.Findings[i]
		if f.Triage != nil && (kind == "" || f.Kind == kind) && (pid == 0 || (f.Process != nil && f.Process.PID == pid)) {
			return f
		}
	}
	return nil
}

func rowByID(id string) triageRow {
	for _, r := range triageTable {
		if r.id == id {
			return r
		}
	}
	return triageRow{}
}

// signCase is a process on one side of a compromise rule's line.
type signCase struct {
	p   snapshot.Process
	ctx signContext
}

// Every rule of compromiseSigns is tried on each side of its line, with a
// process it calls a sign and one it does not (a note, where the rule has one).
func TestCompromiseRulesBothSides(t *testing.T) {
	job := signContext{inJob: true, jobUIDs: map[int]bool{1000: true}}
	other := signContext{otherJob: true, jobUIDs: map[int]bool{1000: true}}
	at := func(exe string, opts ...procOpt) snapshot.Process { return gpuProc(40, path.Base(exe), exe, opts...) }
	pkg := func(status string) procOpt {
		return set(func(p *snapshot.Process) { p.Package = &snapshot.Package{Name: "python3.11-minimal", Status: status} })
	}
	cases := map[string][2]signCase{
		"kernel-thread-name": {{at("/usr/bin/x", set(func(p *snapshot.Process) { p.Comm = "kworker/0:1" })), job},
			{at("/usr/bin/x", set(func(p *snapshot.Process) { p.Comm, p.KernelThread = "kworker/0:1", true })), job}},
		"name-lies":       {{at("/opt/xmrig", set(func(p *snapshot.Process) { p.Comm = "sshd" })), job}, {at("/opt/xmrig"), job}},
		"deleted-exe":     {{at("/opt/app/train", set(func(p *snapshot.Process) { p.ExeDeleted = true })), job}, {at("/opt/app/train"), job}},
		"dev-shm":         {{at("/dev/shm/train"), job}, {at("/srv/shm/train"), job}},
		"temp-dir":        {{at("/tmp/job/train", set(func(p *snapshot.Process) { p.Comm = "python3" })), job}, {at("/tmp/job/train"), job}},
		"hidden-dir":      {{at("/home/bob/.cache/x/train"), signContext{}}, {at("/home/bob/.cache/x/train"), other}},
		"unexpected-user": {{at("/opt/app/train", set(func(p *snapshot.Process) { p.UID, p.User = 0, "root" })), job}, {at("/opt/app/train"), job}},
		"modified-package": {{at("/usr/bin/python3.11", pkg(provenance.Modified)), job},
			{at("/usr/bin/python3.11", pkg(provenance.Verified)), job}},
		"unpackaged-system-exe": {{at("/usr/bin/python3.11", pkg(provenance.NotPackaged)), job},
			{at("/opt/conda/bin/python3.11", pkg(provenance.NotPackaged)), job}},
		"pool-egress": {{at("/opt/app/train", sockets(tcp("10.0.0.1:1", "10.0.0.2:3333", "established"))), job},
			{at("/opt/app/train", sockets(tcp("10.0.0.1:1", "10.0.0.2:443", "established"))), job}},
	}
	for _, r := range compromiseRules {
		sides, ok := cases[r.id]
		if !ok {
			t.Errorf("%s: no case", r.id)
			continue
		}
		if lie, _ := r.test(&sides[0].p, sides[0].ctx); lie == "" {
			t.Errorf("%s: %s (%s) gives no sign", r.id, sides[0].p.Exe, sides[0].p.Comm)
		}
		lie, note := r.test(&sides[1].p, sides[1].ctx)
		if lie != "" || (r.note != "") != (note != "") {
			t.Errorf("%s: %s (%s) gives sign %q note %q, want no sign and a note only where the rule has one", r.id, sides[1].p.Exe, sides[1].p.Comm, lie, note)
		}
	}
}

// The lines of temp-dir and hidden-dir hold through a whole diff. The job's
// own build in its $TMPDIR is the tenant's, and with a name that lies it is a
// compromise. Another job's Bazel binary, and its hidden-directory binary,
// are that job's, and a deleted one a compromise.
func TestCompromiseNeedsALie(t *testing.T) {
	job := func(id string) procOpt {
		return set(func(p *snapshot.Process) {
			p.SlurmJobID = id
			p.Cgroups = []string{"0::/system.slice/slurmstepd.scope/job_" + id + "/step_0/user/task_0"}
		})
	}
	shell := proc(60, 1, "bash", "/usr/bin/bash", job("4242"))
	for _, c := range []struct {
		name  string
		p     snapshot.Process
		class string
		why   string
	}{
		{"job's build in its TMPDIR", gpuProc(61, "train", "/tmp/slurm-4242/train", job("4242")), ClassTenant, "a job's own build"},
		{"the same, named python3", gpuProc(62, "python3", "/tmp/slurm-4242/train", job("4242")), ClassSuspectedCompromise, "disagrees with exe"},
		{"the same, as root", gpuProc(63, "train", "/tmp/slurm-4242/train", job("4242"), set(func(p *snapshot.Process) { p.UID, p.User = 0, "root" })),
			ClassSuspectedCompromise, "a user none of its job's other processes runs as"},
		{"the same, outside any job", gpuProc(64, "train", "/tmp/train"), ClassSuspectedCompromise, "lies under /tmp"},
		{"another job's Bazel binary", gpuProc(65, "server", "/home/ann/.cache/bazel/_bazel_ann/1f2e/execroot/_main/bazel-out/k8-opt/bin/server", job("77")),
			ClassAnotherTenant, "its cgroup names slurm job 77"},
		{"another job's hidden binary", gpuProc(66, "server", "/home/ann/.tools/server", job("77")), ClassAnotherTenant, "lies under hidden directory /home/ann/.tools"},
		{"another job's deleted binary", gpuProc(67, "server", "/tmp/server", job("77"), set(func(p *snapshot.Process) { p.ExeDeleted = true })),
			ClassSuspectedCompromise, "was deleted"},
	} {
		r := Compare(tenantSnap("from", "4242", shell), tenantSnap("to", "4242", shell, c.p), Options{})
		f := pick(r, "", c.p.PID)
		if f == nil {
			t.Errorf("%s: no finding", c.name)
			continue
		}
		if why := strings.Join(f.Triage.Why, "\n"); f.Triage.Class != c.class || !strings.Contains(why, c.why) {
			t.Errorf("%s: %s (%s), want %s with why naming %q:\n%s", c.name, f.Triage.Class, f.Triage.Rule, c.class, c.why, why)
		}
	}
}
