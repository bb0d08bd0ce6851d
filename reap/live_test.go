package reap_test

// Live tests of gpusnap reap (root; internal/livetest and docs/testing.md):
// each runs in a pid and mount namespace of its own, where gpusnap sees and
// can signal no other test's processes, on a loop device named nvidia0.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/schematest"
	"github.com/gpusnap/gpusnap/internal/testwait"
	"github.com/gpusnap/gpusnap/reap"
)

func TestMain(m *testing.M) {
	code := m.Run()
	livetest.RemoveGpusnap()
	os.Exit(code)
}

// nobody is the real non-root user the user variants run as.
const nobody = "65534"

// liveHost is one test's namespace, its fake GPU and its gpusnap.
type liveHost struct {
	t      *testing.T
	ns     *livetest.Namespace
	loop   *livetest.Loop
	dir    string // outside /tmp (a binary under /tmp is a masquerade sign); every user reads it
	bin    string // gpusnap
	worker string // the tenant helper, named as a job's binary
	db     string
	user   string // "" root, else the uid gpusnap and the workers run as
	tenant string
	env    []string // extra environment of gpusnap
	allow  string   // reap's and diff's --allow
}

func newLiveHost(t *testing.T, user string) *liveHost {
	t.Helper()
	livetest.Require(t, "losetup", "gcc", "unshare", "nsenter", "python3", "setpriv")
	// The namespace hides other tests' processes, not the kernel log, which
	// reap's judgements and the diffs read. A record forged there in the
	// window would be a finding on every GPU.
	livetest.ShareKernelLog(t)
	h := &liveHost{t: t, loop: livetest.NewLoop(t), user: user, tenant: "reap-live"}
	if user != "" {
		// The user opens the fake GPU as a tenant opens its GPU.
		if err := os.Chown(h.loop.Node, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		// The node's directories: <test's temp root>/<n>/dev.
		for dir := filepath.Dir(h.loop.Node); dir != os.TempDir(); dir = filepath.Dir(dir) {
			must(t, os.Chmod(dir, 0o755))
		}
	}
	var err error
	if h.dir, err = os.MkdirTemp("/var/lib", "gpusnap-reap-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(h.dir) })
	must(t, os.Chmod(h.dir, 0o755))
	h.bin = h.copy(livetest.Gpusnap(t), "gpusnap")
	h.worker = h.copy(livetest.TenantBinary(t), "worker")
	state := filepath.Join(h.dir, "state")
	must(t, os.Mkdir(state, 0o755))
	if user != "" {
		must(t, os.Chown(state, 65534, 65534))
	}
	h.db = filepath.Join(state, "gpusnap.db")
	h.ns = livetest.NewNamespace(t)
	return h
}

func (h *liveHost) copy(src, name string) string {
	b, err := os.ReadFile(src)
	must(h.t, err)
	dst := filepath.Join(h.dir, name)
	must(h.t, os.WriteFile(dst, b, 0o755))
	return dst
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// command runs argv in the namespace, as h's user.
func (h *liveHost) command(argv ...string) *exec.Cmd {
	if h.user != "" {
		argv = append([]string{"setpriv", "--reuid=" + h.user, "--regid=" + h.user, "--clear-groups", "--"}, argv...)
	}
	return h.ns.Command(argv[0], argv[1:]...)
}

// gpusnap runs gpusnap in the namespace with the store and no NVML.
func (h *liveHost) gpusnap(args ...string) (code int, stdout, stderr string) {
	h.t.Helper()
	args = append(args, "--db", h.db, "--no-nvml", "--capture", "proc")
	if args[0] == "reap" || args[0] == "diff" {
		args = append(args, "--allow", h.allow)
	}
	cmd := h.command(append([]string{h.bin}, args...)...)
	cmd.Env = append(os.Environ(), h.env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		h.t.Fatalf("gpusnap %s: %v", strings.Join(args, " "), err)
	}
	return code, out.String(), errOut.String()
}

// baseline takes the tenant's baseline.
func (h *liveHost) baseline() {
	h.t.Helper()
	if code, _, stderr := h.gpusnap("baseline", "--tenant", h.tenant); code != 0 {
		h.t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
}

// start runs script with sh in the namespace, as h's user, and waits until
// it has written the roles to the PID file $PIDS (the tenant helper's
// format, or "ROLE PID PID START" by hand); it returns them as the host
// sees them. The script's own output goes to a file: a process it leaves
// running keeps it open.
func (h *liveHost) start(script string, roles ...string) map[string]livetest.Proc {
	h.t.Helper()
	dir, err := os.MkdirTemp(h.dir, "run-")
	must(h.t, err)
	must(h.t, os.Chmod(dir, 0o777))
	pids := filepath.Join(dir, "pids")
	log, err := os.Create(filepath.Join(dir, "log"))
	must(h.t, err)
	defer log.Close()
	cmd := h.command("sh", "-c", script)
	cmd.Env = append(os.Environ(), "PIDS="+pids, "NODE="+h.loop.Node, "WORKER="+h.worker, "DIR="+h.dir)
	cmd.Stdout, cmd.Stderr = log, log
	must(h.t, cmd.Start())
	go func() { _ = cmd.Wait() }()
	var text []byte
	if testwait.For(20*time.Second, fmt.Sprintf("%v in the PID file", roles), func() bool {
		text, err = os.ReadFile(pids)
		return err == nil && hasRoles(string(text), roles)
	}) != nil {
		out, _ := os.ReadFile(log.Name())
		h.t.Fatalf("%s: no %v in the PID file: %s", script, roles, out)
	}
	return h.procs(string(text), roles)
}

func hasRoles(text string, roles []string) bool {
	for _, r := range roles {
		if !strings.Contains("\n"+text, "\n"+r+" ") {
			return false
		}
	}
	return true
}

// procs reads the roles of a PID file of namespace PIDs into host processes, each
// checked against the start time the file gives.
func (h *liveHost) procs(text string, roles []string) map[string]livetest.Proc {
	out := map[string]livetest.Proc{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			h.t.Fatalf("PID file line %q", line)
		}
		if !slices.Contains(roles, f[0]) {
			continue // the ghost's parent, say, which has exited
		}
		nspid, _ := strconv.Atoi(f[2])
		p := h.ns.Proc(h.t, nspid)
		if strconv.FormatUint(p.StartTime, 10) != f[3] {
			h.t.Fatalf("%s: started at %d, the PID file says %s", f[0], p.StartTime, f[3])
		}
		out[f[0]] = p
	}
	return out
}

// pidfd opens a pidfd on p, checked against its start time: the test's own
// proof of what reap killed and what it did not.
func pidfd(t *testing.T, p livetest.Proc) int {
	t.Helper()
	fd, err := unix.PidfdOpen(p.PID, 0)
	must(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	if !p.Alive() {
		t.Fatalf("pid %d is not the process %d@%d", p.PID, p.PID, p.StartTime)
	}
	return fd
}

// exited reports whether the process of pidfd fd has exited.
func exited(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

// waitExited waits for the process of pidfd fd to exit.
func waitExited(fd int, d time.Duration) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, int(d/time.Millisecond))
	return err == nil && n > 0
}

// report is gpusnap reap --json's output, as far as the tests read it.
type report struct {
	raw      []byte         // the whole output, for its schema
	Verdict  string         `json:"verdict"`
	DryRun   bool           `json:"dry_run"`
	Plan     reap.Plan      `json:"plan"`
	Outcomes []reap.Outcome `json:"outcomes"`
	Evidence *struct {
		Dir      string `json:"dir"`
		Verified bool   `json:"verified"`
		Bundle   struct {
			File string `json:"file"`
		} `json:"bundle"`
		Memory []reap.Memory `json:"memory"`
		Log    string        `json:"log"`
	} `json:"evidence"`
	After *struct {
		Verdict string          `json:"verdict"`
		GPUs    []reap.GPUAfter `json:"gpus"`
	} `json:"after"`
}

// reap runs gpusnap reap --json --tenant with args and decodes its report.
func (h *liveHost) reap(args ...string) (int, report) {
	h.t.Helper()
	code, stdout, stderr := h.gpusnap(append([]string{"reap", "--json", "--tenant", h.tenant}, args...)...)
	r := report{raw: []byte(stdout)}
	if err := json.Unmarshal(r.raw, &r); err != nil {
		h.t.Fatalf("reap %v: exit %d: %v: %q %s", args, code, err, stdout, stderr)
	}
	if stderr != "" {
		h.t.Logf("reap %v: stderr: %s", args, stderr)
	}
	return code, r
}

// steps are the plan's steps on p, in order.
func steps(p reap.Plan, proc livetest.Proc) []string {
	var out []string
	for _, a := range p.Actions {
		if same(a.Process, proc) || (a.Parent != nil && same(*a.Parent, proc)) {
			out = append(out, a.Step)
		}
	}
	return out
}

// same says whether a target of the plan, which names PIDs as the
// namespace sees them, is p.
func same(t reap.Target, p livetest.Proc) bool { return t.PID == p.NSPID && t.StartTime == p.StartTime }

// outcome is the outcome of p's step, or a zero one.
func outcome(r report, step string, proc livetest.Proc) reap.Outcome {
	for _, o := range r.Outcomes {
		t := o.Action.Process
		if o.Action.Parent != nil && step == reap.StepEndParent {
			t = *o.Action.Parent
		}
		if o.Action.Step == step && same(t, proc) {
			return o
		}
	}
	return reap.Outcome{}
}

// ghostScript forks a setsid ghost of the worker, which then holds the fake
// GPU with its parent gone: the common leftover.
const ghostScript = `"$WORKER" -g "$NODE" "$PIDS" </dev/null >/dev/null 2>&1`

// A setsid leftover worker: the dry run names it and kills nothing (the
// test's pidfd on it stays unreadable); --yes writes and verifies the
// evidence, freezes and ends it through its pidfd, and the judgement run
// again finds the GPU clean: exit 0. As root and as a real user.
func TestLiveReapLeftover(t *testing.T) {
	asRootAndUser(t, func(t *testing.T, user string) {
		h := newLiveHost(t, user)
		h.baseline()
		ghost := h.start(ghostScript, "ghost")["ghost"]
		fd := pidfd(t, ghost)

		code, r := h.reap()
		dry := r
		if code != 1 || !r.DryRun || r.Verdict != "not clean" {
			t.Errorf("dry run: exit %d, dry_run %v, verdict %q: want 1, true, not clean", code, r.DryRun, r.Verdict)
		}
		if got := strings.Join(steps(r.Plan, ghost), ","); got != "freeze,terminate" {
			t.Errorf("plan for the ghost: %s, want freeze,terminate: %+v", got, r.Plan)
		}
		for _, a := range r.Plan.Actions {
			if a.Process.PID != 0 && (a.Rule == "" || a.Rule == a.Class || a.Finding == "") {
				t.Errorf("an action names no finding or no triage rule: %+v", a)
			}
		}
		if waitExited(fd, 200*time.Millisecond) || len(r.Outcomes) > 0 {
			t.Fatalf("the dry run ended the ghost (%v) or did something: %+v", exited(fd), r.Outcomes)
		}

		siem := filepath.Join(filepath.Dir(h.db), "ocsf.jsonl")
		code, r = h.reap("--yes", "--grace", "2s", "--ocsf-file", siem)
		done := r
		if code != 0 || r.After == nil || r.After.Verdict != "clean" {
			t.Errorf("--yes: exit %d, after %+v: want 0 and clean; outcomes %+v", code, r.After, r.Outcomes)
		}
		if b, err := os.ReadFile(siem); err != nil || !bytes.Contains(b, []byte(`"activity_name":"Close"`)) || !bytes.Contains(b, []byte(`"pid":`+strconv.Itoa(ghost.NSPID)+`,`)) {
			t.Errorf("--ocsf-file: no Close of the ghost's findings: %v\n%s", err, b)
		}
		if r.After == nil || len(r.After.GPUs) != 1 || r.After.GPUs[0].GPU != "0" || r.After.GPUs[0].Verdict != "clean" {
			t.Errorf("--yes: after, GPU by GPU: %+v: want the fake GPU 0, clean", r.After)
		}
		if o := outcome(r, reap.StepTerminate, ghost); o.Result != reap.ResultDone || o.Detail != "exited after SIGTERM" {
			t.Errorf("terminate: %+v", o)
		}
		if !waitExited(fd, 5*time.Second) {
			t.Errorf("the ghost %d still runs after reap --yes", ghost.PID)
		}
		ev := r.Evidence
		switch {
		case ev == nil || !ev.Verified:
			t.Errorf("no verified evidence: %+v", ev)
		case !strings.HasPrefix(ev.Log, fmt.Sprintf("%d actions recorded", len(r.Outcomes))):
			t.Errorf("evidence log %q", ev.Log)
		default:
			if _, err := os.Stat(ev.Bundle.File); err != nil {
				t.Errorf("bundle: %v", err)
			}
			if code, out, _ := h.gpusnap("verify", ev.Bundle.File); code != 0 {
				t.Errorf("gpusnap verify %s: exit %d: %s", ev.Bundle.File, code, out)
			}
		}

		// Reaped, the host is clean: a reap again plans nothing and keeps
		// no evidence.
		code, r = h.reap("--yes")
		if code != 0 || len(r.Plan.Actions) != 0 || r.Evidence != nil || r.After == nil || r.After.Verdict != "clean" {
			t.Errorf("--yes on a clean host: exit %d, plan %+v, evidence %+v, after %+v: want 0, nothing and no evidence", code, r.Plan, r.Evidence, r.After)
		}
		if runs, err := os.ReadDir(filepath.Join(filepath.Dir(h.db), "reap")); err != nil || len(runs) != 1 {
			t.Errorf("evidence directories %v (%v): want only the first reap's", runs, err)
		}
		schematest.Validate(t, "reap", dry.raw, done.raw, r.raw)
	})
}

// asRootAndUser runs test as root and as the real non-root user, each a
// subtest: a tenant reaps its own leftovers without privilege.
func asRootAndUser(t *testing.T, test func(t *testing.T, user string)) {
	for _, user := range []string{"", nobody} {
		name := "root"
		if user != "" {
			name = "uid " + user
		}
		t.Run(name, func(t *testing.T) { test(t, user) })
	}
}

// A worker that ignores SIGTERM is killed with SIGKILL once the grace ends,
// as root and as a real user.
func TestLiveReapIgnoresTerm(t *testing.T) {
	asRootAndUser(t, func(t *testing.T, user string) {
		h := newLiveHost(t, user)
		h.baseline()
		ghost := h.start(`trap "" TERM; `+ghostScript, "ghost")["ghost"]
		fd := pidfd(t, ghost)
		began := time.Now()
		code, r := h.reap("--yes", "--grace", "1s")
		o := outcome(r, reap.StepTerminate, ghost)
		if code != 0 || o.Result != reap.ResultDone || o.Detail != "killed (SIGKILL) after a grace of 1s" {
			t.Errorf("exit %d, terminate %+v: want 0 and a kill after the grace", code, o)
		}
		if took := time.Since(began); took < time.Second {
			t.Errorf("reap took %s: the grace was not waited", took)
		}
		if !waitExited(fd, 5*time.Second) {
			t.Errorf("the ghost %d still runs", ghost.PID)
		}
	})
}

// A parent loop that starts the worker again: the plan ends the loop first,
// and the judgement after proves nothing came back, as does another a
// moment later. As root and as a real user.
func TestLiveReapParentLoop(t *testing.T) {
	asRootAndUser(t, func(t *testing.T, user string) {
		h := newLiveHost(t, user)
		h.baseline()
		loop := `setsid sh -c 'n=0; echo "loop $$ $$ $(cut -d" " -f22 /proc/$$/stat)" >> "$PIDS"
while :; do n=$((n+1)); "$WORKER" "$NODE" "$PIDS.$n"; sleep 0.2; done' </dev/null >/dev/null 2>&1 &
until [ -s "$PIDS.1" ]; do sleep 0.05; done; sed 's/^tenant/worker/' "$PIDS.1" >> "$PIDS"`
		procs := h.start(loop, "loop", "worker")
		worker, parent := procs["worker"], procs["loop"]
		wfd, pfd := pidfd(t, worker), pidfd(t, parent)

		_, r := h.reap()
		if got := strings.Join(steps(r.Plan, worker), ","); got != "freeze,end_parent,terminate" {
			t.Fatalf("plan: %s, want freeze,end_parent,terminate: %+v", got, r.Plan)
		}
		code, r := h.reap("--yes", "--grace", "2s")
		if code != 0 || r.After == nil || r.After.Verdict != "clean" {
			t.Errorf("--yes: exit %d, after %+v: want 0 and clean: %+v", code, r.After, r.Outcomes)
		}
		if o := outcome(r, reap.StepEndParent, parent); o.Result != reap.ResultDone {
			t.Errorf("end_parent: %+v", o)
		}
		if !waitExited(wfd, 5*time.Second) || !waitExited(pfd, 5*time.Second) {
			t.Errorf("the worker (%v) or its loop (%v) still runs", exited(wfd), exited(pfd))
		}
		time.Sleep(500 * time.Millisecond) // workload: the loop would start a worker again within its 0.2 s pause
		if code, stdout, _ := h.gpusnap("diff", "--tenant", h.tenant); code != 0 {
			t.Errorf("a moment later, diff: exit %d: something came back: %s", code, stdout)
		}
	})
}

// A worker of a unit with Restart=always (under a unit root of the test's,
// whose systemctl stands in for systemd's: it stops the supervisor and
// kills the unit's cgroup) is left without --stop-units, and with it its
// unit is stopped first, the worker ended, and nothing comes back.
func TestLiveReapUnit(t *testing.T) {
	// Made first, so that its cleanup waits for the namespace's end.
	unit := "gpusnap-reap-" + strconv.Itoa(os.Getpid()) + ".service"
	join := livetest.UnitCgroup(t, unit)
	h := newLiveHost(t, "")
	cgroup := h.cgroupDir(join)
	root := filepath.Join(h.dir, "units")
	must(t, os.MkdirAll(filepath.Join(root, "etc/systemd/system"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "etc/systemd/system", unit), []byte("[Service]\nExecStart=/bin/true\nRestart=always\n"), 0o644))
	bin := filepath.Join(h.dir, "bin")
	must(t, os.Mkdir(bin, 0o755))
	calls := filepath.Join(h.dir, "systemctl.calls")
	must(t, os.WriteFile(filepath.Join(bin, "systemctl"), []byte(fmt.Sprintf(`#!/bin/sh
echo "$*" >> %[1]s
[ "$3" = %[2]s ] && touch %[3]s/stopped && echo 1 > %[4]s/cgroup.kill
exit 0
`, calls, unit, h.dir, cgroup)), 0o755))
	h.env = []string{"PATH=" + bin + ":" + os.Getenv("PATH")}
	h.baseline()
	// The supervisor is named systemd, as the unit's real parent is.
	h.copy("/bin/sh", "systemd")
	must(t, os.WriteFile(filepath.Join(h.dir, "supervise"), []byte(`echo "supervisor $$ $$ $(cut -d' ' -f22 /proc/$$/stat)" >> "$PIDS"
n=0
until [ -e "$DIR/stopped" ]; do
	n=$((n+1))
	sh -c 'echo $$ > "$1/cgroup.procs" && exec "$WORKER" "$NODE" "$2"' sh `+cgroup+` "$PIDS.$n"
	sleep 0.2
done
`), 0o644))
	procs := h.start(`"$DIR/systemd" "$DIR/supervise" </dev/null >/dev/null 2>&1 &
until [ -s "$PIDS.1" ]; do sleep 0.05; done; sed 's/^tenant/worker/' "$PIDS.1" >> "$PIDS"`, "supervisor", "worker")
	worker := procs["worker"]
	fd := pidfd(t, worker)

	code, r := h.reap("--yes", "--unit-root", root)
	if code != 1 || steps(r.Plan, worker)[0] != reap.StepLeave || !strings.Contains(r.Plan.Actions[0].Why, "--stop-units") {
		t.Errorf("without --stop-units: exit %d, plan %+v: want 1 and the worker left, naming --stop-units", code, r.Plan)
	}
	if exited(fd) {
		t.Fatal("the worker was ended without --stop-units")
	}
	code, r = h.reap("--yes", "--stop-units", "--unit-root", root)
	if got := strings.Join(steps(r.Plan, worker), ","); got != "stop_unit,freeze,terminate" {
		t.Errorf("plan: %s, want stop_unit,freeze,terminate", got)
	}
	if code != 0 || r.After == nil || r.After.Verdict != "clean" {
		t.Errorf("--stop-units --yes: exit %d, after %+v: %+v", code, r.After, r.Outcomes)
	}
	if !waitExited(fd, 5*time.Second) {
		t.Error("the worker still runs")
	}
	got, _ := os.ReadFile(calls)
	if string(got) != "stop -- "+unit+"\n" {
		t.Errorf("systemctl calls %q, want one stop of %s", got, unit)
	}
	time.Sleep(500 * time.Millisecond) // workload: the supervisor would restart the worker within its 0.2 s pause
	if code, stdout, _ := h.gpusnap("diff", "--tenant", h.tenant); code != 0 {
		t.Errorf("a moment later, diff: exit %d: %s", code, stdout)
	}
}

// cgroupDir finds the directory of the cgroup join puts a process in.
func (h *liveHost) cgroupDir(join func(int)) string {
	h.t.Helper()
	cmd := exec.Command("sleep", "60")
	must(h.t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	join(cmd.Process.Pid)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid))
	must(h.t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok && rest != "/" {
			return filepath.Join(reap.CgroupV2Mount(), rest)
		}
	}
	h.t.Skipf("no cgroup v2 hierarchy here: %q", b)
	return ""
}

// Another tenant's process and an allowed daemon on the same GPU are left,
// with why, while the leftover beside them is ended.
func TestLiveReapSpares(t *testing.T) {
	// Made first, so that its cleanup waits for the namespace's end.
	join := livetest.PodCgroup(t, "3f0c1e2a-reap-"+strconv.Itoa(os.Getpid()))
	h := newLiveHost(t, "")
	pod := h.cgroupDir(join)
	h.copy(h.worker, "gpu-daemon")
	h.allow = filepath.Join(h.dir, "allow")
	must(t, os.WriteFile(h.allow, []byte("comm=gpu-daemon\n"), 0o644))
	h.baseline()
	ghost := h.start(ghostScript, "ghost")["ghost"]
	others := h.start(`sh -c 'echo $$ > `+pod+`/cgroup.procs && exec "$WORKER" "$NODE" "$PIDS.pod"' </dev/null >/dev/null 2>&1 &
"$DIR/gpu-daemon" "$NODE" "$PIDS.daemon" </dev/null >/dev/null 2>&1 &
until [ -s "$PIDS.pod" ] && [ -s "$PIDS.daemon" ]; do sleep 0.05; done
sed 's/^tenant/pod/' "$PIDS.pod" >> "$PIDS"; sed 's/^tenant/daemon/' "$PIDS.daemon" >> "$PIDS"`, "pod", "daemon")
	gfd, pfd, dfd := pidfd(t, ghost), pidfd(t, others["pod"]), pidfd(t, others["daemon"])

	code, r := h.reap("--yes", "--grace", "2s")
	for role, want := range map[string]string{"pod": "another tenant's: ", "daemon": "allowed: "} {
		got := steps(r.Plan, others[role])
		o := outcome(r, reap.StepLeave, others[role])
		if len(got) != 1 || got[0] != reap.StepLeave || o.Result != reap.ResultLeft || !strings.HasPrefix(o.Action.Why, want) {
			t.Errorf("%s: plan %v, outcome %+v: want left, %q", role, got, o, want)
		}
	}
	if o := outcome(r, reap.StepTerminate, ghost); o.Result != reap.ResultDone || !waitExited(gfd, 5*time.Second) {
		t.Errorf("the leftover beside them: %+v", o)
	}
	if exited(pfd) || exited(dfd) {
		t.Errorf("reap ended another tenant's process (%v) or the allowed daemon (%v)", exited(pfd), exited(dfd))
	}
	t.Logf("exit %d, after %+v", code, r.After)
}

// A process in D state (waiting on a FUSE server that never answers) is
// refused: the plan says to drain and reboot, and the GPU is not clean
// after (exit 1), which is what drains a Slurm node.
func TestLiveReapDState(t *testing.T) {
	path := livetest.StuckFUSE(t)
	h := newLiveHost(t, "")
	h.baseline()
	stuck := h.start(`/usr/bin/python3 -c 'import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 65536, mmap.MAP_SHARED)
start = open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19]
open(sys.argv[2], "w").write("stuck %d %d %s\n" % (os.getpid(), os.getpid(), start))
open(sys.argv[3]).read()' "$NODE" "$PIDS" `+path+` </dev/null >/dev/null 2>&1 &`, "stuck")["stuck"]
	fd := pidfd(t, stuck)
	testwait.Until(t, 10*time.Second, "the process to enter D state", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", stuck.PID))
		i := bytes.LastIndexByte(b, ')')
		return err == nil && i > 0 && len(b) > i+2 && b[i+2] == 'D'
	})
	code, r := h.reap("--yes")
	o := outcome(r, reap.StepLeave, stuck)
	if code != 1 || o.Result != reap.ResultLeft || !strings.Contains(o.Action.Why, "reboot") || o.Action.Class != "unkillable" {
		t.Errorf("exit %d, outcome %+v: want 1, and the process left with drain and reboot", code, o)
	}
	if exited(fd) || r.After == nil || r.After.Verdict != "not clean" {
		t.Fatalf("exited %v, after %+v", exited(fd), r.After)
	}
	key := fmt.Sprintf("%d@%d (python3)", stuck.NSPID, stuck.StartTime)
	if g := r.After.GPUs; len(g) != 1 || g[0].GPU != "0" || g[0].Verdict != "not clean" || !strings.Contains(strings.Join(g[0].Why, "; "), key) {
		t.Errorf("after, GPU by GPU: %+v: want GPU 0 not clean, held by %s", g, key)
	}
}

// A suspected compromise (its binary runs from /dev/shm) has its memory
// kept before it is ended: at most --memory-limit, the fake GPU's mapping
// left out, the file's SHA-256 the one reported.
func TestLiveReapKeepsMemory(t *testing.T) {
	h := newLiveHost(t, "")
	shm, err := os.MkdirTemp("/dev/shm", ".reap-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(shm) })
	b, err := os.ReadFile(h.worker)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(shm, "worker"), b, 0o755))
	h.baseline()
	ghost := h.start(`"`+shm+`/worker" -g "$NODE" "$PIDS" </dev/null >/dev/null 2>&1`, "ghost")["ghost"]
	fd := pidfd(t, ghost)
	code, r := h.reap("--yes", "--memory-limit", "64KiB")
	if got := strings.Join(steps(r.Plan, ghost), ","); got != "keep_memory,freeze,terminate" || code != 0 {
		t.Fatalf("exit %d, plan %s: want 0 and keep_memory,freeze,terminate: %+v", code, got, r.Outcomes)
	}
	if o := outcome(r, reap.StepKeepMemory, ghost); o.Result != reap.ResultDone || r.Evidence == nil || len(r.Evidence.Memory) != 1 {
		t.Fatalf("keep_memory: %+v, evidence %+v", o, r.Evidence)
	}
	m := r.Evidence.Memory[0]
	data, err := os.ReadFile(m.File)
	must(t, err)
	sum := sha256.Sum256(data)
	regions, err := os.ReadFile(m.Index)
	must(t, err)
	switch {
	case int64(len(data)) != m.Bytes || m.Bytes == 0 || m.Bytes > 64<<10 || !m.Cut:
		t.Errorf("kept %d bytes (file %d), cut %v: want at most 64 KiB, cut", m.Bytes, len(data), m.Cut)
	case hex.EncodeToString(sum[:]) != m.SHA256:
		t.Errorf("sha256 %s, the file's is %x", m.SHA256, sum)
	case bytes.Contains(regions, []byte(h.loop.Node)):
		t.Errorf("the fake GPU's mapping was kept:\n%s", regions)
	case !bytes.Contains(regions, []byte(shm+"/worker")):
		t.Errorf("the regions name no mapping of the binary:\n%s", regions)
	}
	if !waitExited(fd, 5*time.Second) {
		t.Error("the process still runs")
	}
}

// TestLiveKeepMemoryStalledFUSE: a suspected compromise maps a file from a
// tenant's FUSE mount, none of whose pages it has touched, and the server
// stops answering. Keeping its memory asks the server for none of them: the
// region is named in the index as not read, the rest is kept, and the step
// ends rather than wait on the server for ever.
func TestLiveKeepMemoryStalledFUSE(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("FUSE live test: needs root (mount(2) of /dev/fuse)")
	}
	dir, err := os.MkdirTemp("/run", "gpusnap-fuse-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	must(t, os.Mkdir(backing, 0o755))
	must(t, os.Mkdir(mnt, 0o755))
	must(t, os.WriteFile(filepath.Join(backing, "weights.bin"), bytes.Repeat([]byte("w"), 1<<20), 0o644))
	stall := livetest.StallingFUSE(t, backing, mnt)
	p := livetest.MapFile(t, filepath.Join(mnt, "weights.bin"))
	stall.Store(true)

	type kept struct {
		m   reap.Memory
		err error
	}
	done := make(chan kept, 1)
	go func() {
		m, err := reap.KeepMemory(t.TempDir(), 64<<20, reap.Target{PID: p.PID, StartTime: p.StartTime})
		done <- kept{m, err}
	}()
	var k kept
	select {
	case k = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("keeping the memory waits on the stalled FUSE server")
	}
	must(t, k.err)
	regions, err := os.ReadFile(k.m.Index)
	must(t, err)
	var named bool
	for line := range strings.Lines(string(regions)) {
		if strings.Contains(line, mnt+"/weights.bin") {
			named = strings.Fields(line)[1] == "0" && strings.Contains(line, "not read: on a fuse.tenantfs filesystem")
		}
	}
	if !named || k.m.Unread == 0 || k.m.Bytes == 0 {
		t.Errorf("kept %d bytes, %d regions not read, want the FUSE file's named as not read and the rest kept:\n%s", k.m.Bytes, k.m.Unread, regions)
	}
}
