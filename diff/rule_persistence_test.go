package diff

import (
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/provenance"
	"github.com/gpusnap/gpusnap/snapshot"
)

func TestPersistence(t *testing.T) {
	gpu := mapping("/dev/nvidia0", "rw-s", 0x7f0000000000, 1<<20, 0, "195:0")
	sum := strings.Repeat("ab", 32)
	hashed := func(sum, status string) procOpt {
		return func(p *snapshot.Process) {
			p.ExeSHA256, p.HashStatus, p.Package = sum, snapshot.HashOK, &snapshot.Package{Status: status}
		}
	}
	unit := func(name, restart, timer string) procOpt {
		return func(p *snapshot.Process) { p.SystemdUnit, p.UnitRestart, p.UnitTimer = name, restart, timer }
	}
	cron := func(p *snapshot.Process) {
		p.Ancestry = []snapshot.Ancestor{{PID: 700, StartTime: 1, Comm: "sh"}, {PID: 600, StartTime: 1, Comm: "cron", Exe: "/usr/sbin/cron"}}
	}
	from := snap("from",
		proc(50, 1, "solver", "/opt/solver/bin/solver", gpu, hashed(sum, provenance.NotPackaged)), // exits before TO
		proc(51, 1, "python3", "/usr/bin/python3.11", gpu, hashed(strings.Repeat("cd", 32), provenance.Verified)),
	)
	from.Host.BootID = "boot-a"
	earlier := snap("earlier", proc(40, 1, "xmrig", "/dev/shm/.x/xmrig", gpu, hashed(strings.Repeat("ef", 32), provenance.NotPackaged)))
	earlier.Host.BootID = "boot-0"
	to := snap("to",
		proc(100, 1, "trainer", "/opt/t/trainer", gpu, unit("trainer.service", "always", "")),
		proc(101, 1, "batch", "/opt/t/batch", gpu, unit("batch.service", "no", "batch.timer")),
		proc(102, 1, "job", "/opt/t/job", gpu, cron),
		proc(103, 1, "solver", "/opt/solver/bin/solver", gpu, hashed(sum, provenance.NotPackaged)),
		proc(104, 1, "kworker/0:1", "/dev/shm/.x/xmrig", gpu, hashed(strings.Repeat("ef", 32), provenance.NotPackaged)),
		proc(105, 1, "python3", "/usr/bin/python3.11", gpu, hashed(strings.Repeat("cd", 32), provenance.Verified)),
		proc(106, 1, "web", "/opt/t/web", gpu, unit("web.service", "no", "")),
	)
	to.Host.BootID = "boot-a"
	r := Compare(from, to, Options{History: []*snapshot.Snapshot{earlier}})
	got := map[int]Finding{}
	for _, f := range r.Findings {
		if f.Kind == KindPersistence {
			if _, dup := got[f.Process.PID]; dup {
				t.Errorf("pid %d: two persistence findings", f.Process.PID)
			}
			got[f.Process.PID] = f
		}
	}
	want := map[int]struct {
		sev      Severity
		class    string
		evidence string
	}{
		100: {Medium, ClassLeftoverWorker, "its unit trainer.service has Restart=always"},
		101: {Medium, ClassLeftoverWorker, "timer batch.timer starts its unit batch.service"},
		102: {Medium, ClassLeftoverWorker, "descends from cron (pid 600)"},
		103: {Medium, ClassLeftoverWorker, "used a GPU as pid 50 (solver) in snapshot from, which has exited"},
		104: {High, ClassSuspectedCompromise, "before a reboot (boot boot-0): it survived the reboot"},
	}
	if len(got) != len(want) {
		t.Errorf("persistence for pids %v, want 100-104 (not the verified python3 105 nor web 106 with Restart=no)", keys(got))
	}
	for pid, w := range want {
		f, ok := got[pid]
		if !ok {
			t.Errorf("pid %d: no persistence finding", pid)
			continue
		}
		if f.Severity != w.sev || f.Triage == nil || f.Triage.Class != w.class || !strings.Contains(strings.Join(f.Evidence, "\n"), w.evidence) {
			t.Errorf("pid %d: %s %+v %q, want %s, class %s, evidence with %q", pid, f.Severity, f.Triage, f.Evidence, w.sev, w.class, w.evidence)
		}
	}
	if p := got[100].Process; p == nil || p.UnitRestart != "always" {
		t.Errorf("the finding's process lacks unit_restart: %+v", p)
	}
}

func keys[V any](m map[int]V) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	return out
}
