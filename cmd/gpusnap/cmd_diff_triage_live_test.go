package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
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
	// A job's binary lies where jobs install theirs, not in a staging directory.
	jobDir, err := os.MkdirTemp("/var/lib", "gpusnap-triage-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(jobDir) })
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
