package diff

import (
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

func TestLeadOf(t *testing.T) {
	proc := func(pid int, comm string) *ProcessRef { return &ProcessRef{PID: pid, StartTime: 1, Comm: comm} }
	triaged := func(kind string, p *ProcessRef, class, owner string) Finding {
		return Finding{Kind: kind, Severity: High, Process: p, Triage: &Triage{Class: class, Owner: owner}}
	}
	miner, job, worker := proc(6660, "python3"), proc(4242, "python3"), proc(5000, "python3")
	allowed := triaged(KindUnexpectedGPUProcess, proc(1, "nvidia-persistenced"), ClassExpected, "user root")
	allowed.Allowed = "exe /usr/bin/nvidia-persistenced"
	cases := []struct {
		name string
		fs   []Finding
		want string
	}{
		{"nothing", nil, ""},
		{"only allowed", []Finding{allowed}, ""},
		{"another team's job names its owner", []Finding{triaged(KindLeftoverDeviceHolder, job, ClassAnotherTenant, "slurm job 77"), allowed},
			"another_tenant: pid 4242 (python3), owner slurm job 77"},
		{"the class that asks the most leads, whatever the order", []Finding{
			triaged(KindLeftoverDeviceHolder, job, ClassAnotherTenant, "slurm job 77"),
			triaged(KindLeftoverDeviceMapping, worker, ClassLeftoverWorker, "user bob"),
			triaged(KindUnexpectedGPUProcess, miner, ClassSuspectedCompromise, "uid 1000"),
			triaged(KindLeftoverDeviceHolder, miner, ClassSuspectedCompromise, "uid 1000"),
		}, "suspected_compromise: pid 6660 (python3), owner uid 1000; and 2 more"},
		{"memory with no process", []Finding{{Kind: KindZombieGPUMemory, Severity: High, GPUUUID: "GPU-1", Triage: &Triage{Class: ClassZombieContext}}},
			"zombie_context: GPU GPU-1"},
		{"a triaged finding leads over one without", []Finding{{Kind: KindXidError, Severity: High, GPUUUID: "GPU-1"},
			triaged(KindLeftoverDeviceHolder, job, ClassTenant, "slurm job 4242")},
			"tenant: pid 4242 (python3), owner slurm job 4242; and 1 more"},
		{"without a triage the kind leads", []Finding{{Kind: KindXidError, Severity: High, GPUUUID: "GPU-1"}}, "xid_error: GPU GPU-1"},
	}
	for _, c := range cases {
		if got := LeadOf(c.fs); got != c.want {
			t.Errorf("%s: LeadOf = %q, want %q", c.name, got, c.want)
		}
	}
}

// Owner is whom to ask, the job the owner rule vouches for, else the user by
// name, else by uid, and no one for memory no process holds.
func TestTriageOwner(t *testing.T) {
	gpu := mapping("/dev/nvidia0", "rw-s", 0x7f0000000000, 1<<20, 0, "195:0")
	job := proc(18, 5, "python3", "/usr/bin/python3.11", gpu, func(p *snapshot.Process) { p.SlurmJobID = "77" })
	named := proc(19, 5, "python3", "/usr/bin/python3.11", gpu)
	unnamed := proc(20, 5, "python3", "/usr/bin/python3.11", gpu, func(p *snapshot.Process) { p.User = "" })
	for _, c := range []struct {
		p     snapshot.Process
		owner string
	}{{job, "slurm job 77"}, {named, "user bob"}, {unnamed, "uid 1000"}} {
		to := snap("to", c.p)
		to.Tenant = "4242"
		for _, f := range Compare(snap("from"), to, Options{}).Findings {
			if f.Triage == nil || f.Triage.Owner != c.owner {
				t.Errorf("pid %d: %s: triage %+v, want owner %q", c.p.PID, f.Kind, f.Triage, c.owner)
			}
		}
	}
	z := Finding{Kind: KindZombieGPUMemory, Summary: "GPU 0: 60 GiB no live process accounts for"}
	if got := classify(triageInput{finding: &z}); got.Owner != "" {
		t.Errorf("zombie memory: owner %q, want none", got.Owner)
	}
}
