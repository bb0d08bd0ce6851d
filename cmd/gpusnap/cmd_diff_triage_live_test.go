package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testwait"
)

// Two processes appear on the fake GPU after the baseline: a worker whose
// parent forked it and exited (a DataLoader worker outliving its job), and a
// kworker/0:1 from a hidden directory of /dev/shm that, from a network
// namespace of its own, holds a connection to a stratum port. diff --json
// must tell them apart: leftover_worker (reparented, next: kill) and
// suspected_compromise with a high egress_connection naming the namespace.
func TestLiveDiffTriage(t *testing.T) {
	livetest.Require(t, "losetup", "gcc", "unshare", "ip")
	loop := livetest.NewLoop(t)
	const tenant = "live-triage"
	flags := liveBaseline(t, tenant)
	jobDir := binDir(t, "gpusnap-triage-")
	worker := livetest.StartWorker(t, loop.Node, livetest.WorkerOptions{Fork: true, Exe: filepath.Join(jobDir, "tenant")})
	shm, err := os.MkdirTemp("/dev/shm", ".cache-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	miner := livetest.StartWorker(t, loop.Node, livetest.WorkerOptions{
		Comm: "kworker/0:1", Port: 3333, Netns: true, Exe: filepath.Join(shm, "kworker")})
	netns, err := os.Readlink("/proc/" + strconv.Itoa(miner.Proc.PID) + "/ns/net")
	if err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := gpusnap(t, append([]string{"diff", "--json", "--tenant", tenant}, flags...)...)
	if code != 1 {
		t.Errorf("diff: exit %d, want 1: %s", code, stderr)
	}
	r := decodeResult(t, stdout, stderr)
	byKind := func(pid int) map[string]diff.Finding {
		m := map[string]diff.Finding{}
		for _, f := range r.Findings {
			if f.Process != nil && f.Process.PID == pid {
				m[f.Kind] = f
				if f.Triage == nil {
					t.Errorf("pid %d: %s has no triage", pid, f.Kind)
				}
			}
		}
		return m
	}

	w := byKind(worker.Proc.PID)
	f, ok := w[diff.KindUnexpectedGPUProcess]
	switch {
	case !ok:
		t.Fatalf("no unexpected_gpu_process for the worker %d: %+v", worker.Proc.PID, r.Findings)
	case f.Triage.Class != diff.ClassLeftoverWorker || f.Triage.Rule != "leftover-reparented" || !strings.Contains(f.Triage.Next, "kill -9 "+strconv.Itoa(worker.Proc.PID)):
		t.Errorf("worker: triage %+v, want leftover_worker (leftover-reparented) whose next kills %d", f.Triage, worker.Proc.PID)
	case !strings.Contains(strings.Join(f.Triage.Why, "\n"), "adopted it"):
		t.Errorf("worker: why %q does not say who adopted it, and since when", f.Triage.Why)
	case !f.Process.Reparented || f.Process.PPID == worker.Parent.PID:
		t.Errorf("worker: reparented %v, ppid %d (its parent was %d)", f.Process.Reparented, f.Process.PPID, worker.Parent.PID)
	case len(f.Process.Ancestry) == 0 || f.Process.Ancestry[len(f.Process.Ancestry)-1].PID != 1:
		t.Errorf("worker: ancestry %+v, want it to end at PID 1", f.Process.Ancestry)
	}
	if _, ok := w[diff.KindEgressConnection]; ok {
		t.Errorf("the worker holds no connection, yet: %+v", w[diff.KindEgressConnection])
	}

	m := byKind(miner.Proc.PID)
	f, ok = m[diff.KindUnexpectedGPUProcess]
	if !ok || f.Triage.Class != diff.ClassSuspectedCompromise || f.Triage.Rule != "compromise" || !strings.Contains(f.Triage.Next, "contain the node") {
		t.Errorf("miner: unexpected_gpu_process %v, triage %+v: want suspected_compromise", ok, f.Triage)
	}
	e, ok := m[diff.KindEgressConnection]
	evidence := strings.Join(e.Evidence, "\n")
	switch {
	case !ok:
		t.Errorf("no egress_connection for the miner %d: %+v", miner.Proc.PID, r.Findings)
	case e.Severity != diff.High || !strings.Contains(evidence, "-> 127.0.0.1:3333 established") || !strings.Contains(evidence, "a mining-pool port"):
		t.Errorf("miner's egress: %s %q, want high to 127.0.0.1:3333", e.Severity, e.Evidence)
	case !strings.Contains(evidence, "(netns "+strings.TrimSuffix(strings.TrimPrefix(netns, "net:["), "]")+")"):
		t.Errorf("miner's egress %q does not name its namespace %s", e.Evidence, netns)
	case e.Triage.Class != diff.ClassSuspectedCompromise:
		t.Errorf("miner's egress triage %+v", e.Triage)
	}
}

// A unit with Restart=always, in a unit root where systemd does not run
// (the global --unit-root), starts two GPU users after the baseline: a
// trainer whose name is its exe's, and a miner that calls itself python3.
// A kill alone ends neither: the trainer's next stops the unit first, and
// the miner's contains the node and stops the unit before the kill. Without
// --unit-root the live / has no such unit, and the trainer is a service its
// unit does not restart.
func TestLiveDiffComesBackAndRenamedMiner(t *testing.T) {
	livetest.Require(t, "losetup", "gcc")
	unit := fmt.Sprintf("gpusnap-comesback-%d.service", os.Getpid())
	root := t.TempDir()
	unitFile := filepath.Join(root, "etc", "systemd", "system", unit)
	if err := os.MkdirAll(filepath.Dir(unitFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(unitFile, []byte("[Service]\nExecStart=/opt/trainer\nRestart=always\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	join := livetest.UnitCgroup(t, unit)
	loop := livetest.NewLoop(t)
	const tenant = "live-comes-back"
	flags := liveBaseline(t, tenant)
	dir := binDir(t, "gpusnap-comesback-")
	trainer := livetest.StartWorker(t, loop.Node, livetest.WorkerOptions{Exe: filepath.Join(dir, "trainer")})
	miner := livetest.StartWorker(t, loop.Node, livetest.WorkerOptions{Comm: "python3", Exe: filepath.Join(dir, "xmrig")})
	join(trainer.Proc.PID)
	join(miner.Proc.PID)

	triage := func(args ...string) map[int]*diff.Triage {
		t.Helper()
		code, stdout, stderr := gpusnap(t, append(append([]string{"diff", "--json", "--tenant", tenant}, flags...), args...)...)
		if code != 1 {
			t.Fatalf("diff %q: exit %d, want 1: %s", args, code, stderr)
		}
		out := map[int]*diff.Triage{}
		for _, f := range decodeResult(t, stdout, stderr).Findings {
			if f.Process != nil && f.Triage != nil && f.Kind == diff.KindUnexpectedGPUProcess {
				out[f.Process.PID] = f.Triage
			}
		}
		return out
	}
	got := triage("--unit-root", root)
	stop := "systemctl disable --now " + unit
	switch tr := got[trainer.Proc.PID]; {
	case tr == nil:
		t.Errorf("trainer %d: no unexpected_gpu_process with a triage: %v", trainer.Proc.PID, got)
	case tr.Class != diff.ClassLeftoverWorker || tr.Rule != "persistence-unit" || !strings.Contains(tr.Next, stop) ||
		strings.Index(tr.Next, stop) > strings.Index(tr.Next, "kill -9 "+strconv.Itoa(trainer.Proc.PID)):
		t.Errorf("trainer: %+v, want leftover_worker (persistence-unit) whose next runs %q before the kill", tr, stop)
	case tr.Owner != "user root":
		t.Errorf("trainer: owner %q, want user root", tr.Owner)
	}
	switch tr := got[miner.Proc.PID]; {
	case tr == nil:
		t.Errorf("miner %d: no unexpected_gpu_process with a triage: %v", miner.Proc.PID, got)
	case tr.Class != diff.ClassSuspectedCompromise || tr.Rule != "compromise-persistent" || !strings.Contains(tr.Next, "contain the node") || !strings.Contains(tr.Next, stop):
		t.Errorf("miner: %+v, want suspected_compromise (compromise-persistent) that contains the node and runs %q", tr, stop)
	case !strings.Contains(strings.Join(tr.Why, "\n"), `comm "python3" disagrees`):
		t.Errorf("miner: why %q does not say its name lies", tr.Why)
	}

	if tr := triage()[trainer.Proc.PID]; tr == nil || tr.Rule != "service" || !strings.Contains(tr.Next, "systemctl stop "+unit) {
		t.Errorf("trainer without --unit-root: %+v, want the service row (systemctl stop %s)", tr, unit)
	}
}

// A shell loop in a process group of its own (no session leader, no login
// shell) starts a GPU worker again within 0.2 s of the kill -9 that next
// advises. A snapshot of the tenant saw the first worker: the diff names the
// second as persistence, with the loop that restarts it, and its next ends
// the loop's process group before the worker.
func TestLiveDiffRestartingParent(t *testing.T) {
	const tenant = "live-restarter"
	loop, flags := pythonTenant(t, tenant)
	pids := filepath.Join(t.TempDir(), "pids")
	cmd := exec.Command("sh", "-c", `while :; do python3 -c 'import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 4096, mmap.MAP_SHARED)
open(sys.argv[2], "a").write("%d\n" % os.getpid())
time.sleep(600)' "$0" "$1"; sleep 0.2; done`, loop.Node, pids)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	noErr(t, cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	worker := func(n int) int {
		t.Helper()
		var pid int
		testwait.Until(t, 10*time.Second, fmt.Sprintf("worker %d", n), func() bool {
			data, _ := os.ReadFile(pids)
			lines := strings.Fields(string(data))
			if len(lines) < n {
				return false
			}
			pid, _ = strconv.Atoi(lines[n-1])
			return true
		})
		livetest.WaitMapped(t, pid, "rw-s", loop.Node)
		return pid
	}
	first := worker(1)
	if code, _, stderr := gpusnap(t, append([]string{"snapshot", "--tenant", tenant}, flags...)...); code != 0 {
		t.Fatalf("snapshot: exit %d: %s", code, stderr)
	}
	noErr(t, syscall.Kill(first, syscall.SIGKILL))
	second := worker(2)
	code, stdout, stderr := gpusnap(t, append([]string{"diff", "--json", "--tenant", tenant}, flags...)...)
	if code != exitFindings {
		t.Fatalf("diff: exit %d: %s", code, stderr)
	}
	var found *diff.Finding
	for _, f := range decodeResult(t, stdout, stderr).Findings {
		if f.Kind == diff.KindPersistence && f.Process != nil && f.Process.PID == second {
			found = &f
		}
	}
	group := fmt.Sprintf("kill -9 -- -%d, its process group", cmd.Process.Pid)
	switch {
	case found == nil:
		t.Fatalf("no persistence finding for the restarted worker %d: %s", second, stdout)
	case !strings.Contains(strings.Join(found.Evidence, "\n"), fmt.Sprintf("its ancestor %d@", cmd.Process.Pid)) ||
		!strings.Contains(strings.Join(found.Evidence, "\n"), fmt.Sprintf("it started pid %d (python3)", first)):
		t.Errorf("evidence %q: want the loop %d that started %d before", found.Evidence, cmd.Process.Pid, first)
	case found.Triage == nil || !strings.Contains(found.Triage.Next, group):
		t.Errorf("triage %+v: want next to end %q first", found.Triage, group)
	}
}

// A miner that sends to its pool with unconnected UDP (sendto, no connect)
// leaves no peer in any table: the diff names its socket and says its
// egress is not known, never that it has none.
func TestLiveDiffUnconnectedUDP(t *testing.T) {
	const tenant = "live-udp"
	loop, flags := pythonTenant(t, tenant)
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command("python3", "-c", `import mmap, os, socket, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 4096, mmap.MAP_SHARED)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.sendto(b"mining.submit", ("127.0.0.1", 3333))
open(sys.argv[2], "w").close()
time.sleep(600)`, loop.Node, ready)
	noErr(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testwait.Until(t, 10*time.Second, "the sender", func() bool { _, err := os.Stat(ready); return err == nil })
	code, stdout, stderr := gpusnap(t, append([]string{"diff", "--json", "--tenant", tenant}, flags...)...)
	if code != exitFindings {
		t.Fatalf("diff: exit %d: %s", code, stderr)
	}
	n := 0
	for _, f := range decodeResult(t, stdout, stderr).Findings {
		if f.Process == nil || f.Process.PID != cmd.Process.Pid || f.Triage == nil {
			continue
		}
		n++
		why := strings.Join(f.Triage.Why, "\n")
		if !strings.Contains(why, "an unconnected UDP socket sends where sendto says") || strings.Contains(why, "no egress to a mining pool\n") {
			t.Errorf("%s: why %q: want its egress not known", f.Kind, f.Triage.Why)
		}
	}
	if n == 0 {
		t.Errorf("no triaged finding for the sender %d: %s", cmd.Process.Pid, stdout)
	}
}

// pythonTenant is a live test's fake GPU and the flags of tenant's store,
// its baseline taken, for workers written in python3.
func pythonTenant(t *testing.T, tenant string) (*livetest.Loop, []string) {
	t.Helper()
	livetest.Require(t, "losetup", "python3")
	return livetest.NewLoop(t), liveBaseline(t, tenant)
}
