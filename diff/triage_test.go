package diff

import (
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/provenance"
	"github.com/gpusnap/gpusnap/snapshot"
)

func TestClassify(t *testing.T) {
	gpu := mapping("/dev/nvidia0", "rw-s", 0x7f0000000000, 1<<20, 0, "195:0")
	with := func(p snapshot.Process, f func(*snapshot.Process)) snapshot.Process { f(&p); return p }
	py := func(pid int, opts ...procOpt) snapshot.Process {
		return proc(pid, 5, "python3", "/usr/bin/python3.11", append([]procOpt{gpu}, opts...)...)
	}
	mps := func(pid int) snapshot.Process {
		return proc(pid, 5, "nvidia-cuda-mps", "/usr/bin/nvidia-cuda-mps-server", gpu)
	}
	cases := []struct {
		name  string
		p     snapshot.Process
		allow bool
		class string
		next  string
	}{
		{"masquerade", proc(10, 5, "kworker/0:1", "/dev/shm/.cache/x", gpu), false, ClassSuspectedCompromise, "contain the node"},
		{"modified system binary", with(py(11), func(p *snapshot.Process) {
			p.Package = &snapshot.Package{Name: "python3.11-minimal", Status: provenance.Modified}
		}), false, ClassSuspectedCompromise, "contain the node"},
		{"unpackaged system binary", with(py(12), func(p *snapshot.Process) { p.Package = &snapshot.Package{Status: provenance.NotPackaged} }),
			false, ClassSuspectedCompromise, "contain the node"},
		{"pool connection", py(13, sockets(tcp("10.0.0.1:1", "10.0.0.2:3333", "established"))), false, ClassSuspectedCompromise, "contain the node"},
		{"D state", with(py(14), func(p *snapshot.Process) { p.State, p.Wchan = "D", "fuse_wait" }), false, ClassUnkillable, "reboot"},
		{"allowed", py(15), true, ClassExpected, "none"},
		{"tenant's own", with(py(16), func(p *snapshot.Process) { p.SlurmJobID = "4242" }), false, ClassTenant, "let its job end"},
		{"tenant's, reparented", with(py(17), func(p *snapshot.Process) { p.SlurmJobID, p.Reparented = "4242", true }),
			false, ClassLeftoverWorker, "kill -9 17"},
		{"another job", with(py(18), func(p *snapshot.Process) { p.SlurmJobID = "77" }), false, ClassAnotherTenant, "slurm job 77"},
		{"unowned, reparented", with(py(19), func(p *snapshot.Process) { p.Reparented = true }), false, ClassLeftoverWorker, "kill -9 19"},
		// A cgroup below the tenant's own user manager, named for job 77.
		{"another job's name, self-made", with(py(27), func(p *snapshot.Process) {
			p.SlurmJobID, p.Reparented = "77", true
			p.Cgroups = []string{"0::/user.slice/user-1001.slice/user@1001.service/job_77/x.scope"}
		}), false, ClassLeftoverWorker, "kill -9 27"},
		{"unpackaged outside a system path", with(py(20), func(p *snapshot.Process) {
			p.Exe, p.Package = "/opt/conda/bin/python3.11", &snapshot.Package{Status: provenance.NotPackaged}
		}), false, ClassLeftoverWorker, "kill -9 20"},
		// CUDA MPS's server in each class it can land in, NVML listing no
		// client of it. Its ownership decides, and next says how to stop it.
		{"MPS server left alone", mps(21), false, ClassLeftoverWorker, "echo quit | nvidia-cuda-mps-control"},
		{"MPS server of the tenant's job", with(mps(22), func(p *snapshot.Process) { p.SlurmJobID = "4242" }),
			false, ClassTenant, "let its job end, or kill -9 22 if the job has ended; it stops with echo quit | nvidia-cuda-mps-control"},
		{"MPS server of another job", with(mps(23), func(p *snapshot.Process) { p.SlurmJobID = "77" }),
			false, ClassAnotherTenant, "slurm job 77 to confirm it; no page; the GPU stays refused to the next job while it runs; it stops with echo quit"},
		{"MPS server reparented out of its job", with(mps(24), func(p *snapshot.Process) { p.SlurmJobID, p.Reparented = "4242", true }),
			false, ClassLeftoverWorker, "echo shutdown_server 24 | nvidia-cuda-mps-control"},
		{"MPS server in D state", with(mps(25), func(p *snapshot.Process) { p.State = "D" }), false, ClassUnkillable, "reboot"},
		{"MPS server from /tmp", with(mps(26), func(p *snapshot.Process) { p.Exe = "/tmp/nvidia-cuda-mps-server" }),
			false, ClassSuspectedCompromise, "contain the node"},
	}
	for _, c := range cases {
		to := snap("to", c.p)
		to.Tenant = "4242"
		var opts Options
		if c.allow {
			al, err := ParseAllow(strings.NewReader("exe=/usr/bin/python3.11\n"), "allow")
			if err != nil {
				t.Fatal(err)
			}
			opts.Allow = al
		}
		r := Compare(snap("from"), to, opts)
		if len(r.Findings) == 0 {
			t.Fatalf("%s: no findings", c.name)
		}
		for _, f := range r.Findings {
			if f.Triage == nil || f.Triage.Class != c.class || !strings.Contains(f.Triage.Next, c.next) || len(f.Triage.Why) == 0 || f.Triage.Rule == "" {
				t.Errorf("%s: %s: triage %+v, want %s with next naming %q", c.name, f.Kind, f.Triage, c.class, c.next)
			}
		}
	}
}

// Memory no process accounts for, and a defunct process, are zombie contexts.
func TestClassifyZombie(t *testing.T) {
	z := proc(30, 5, "python3", "", func(p *snapshot.Process) { p.State, p.Threads = "Z", 1 })
	for _, c := range []struct {
		f    Finding
		p    *snapshot.Process
		rule string
	}{
		{Finding{Kind: KindZombieGPUMemory, Summary: "GPU 0: 60 GiB no live process accounts for"}, nil, "zombie-no-holder"},
		{Finding{Kind: KindOrphanGPUProcess, Summary: "NVML lists pid 30", Process: processRef(&z)}, &z, "defunct"},
	} {
		got := classify(triageInput{finding: &c.f, proc: c.p})
		if got.Class != ClassZombieContext || !strings.Contains(got.Next, "reset the GPU") || got.Rule != c.rule {
			t.Errorf("%s: %+v, want zombie_context with a reset", c.f.Kind, got)
		}
	}
}

// Outside a diff (gpusnap ps) an MPS server's verdict follows its live
// clients. Serving one of slurm job 77's, it is that job's (a tenant's, as
// ps calls a job's own) and is left alone. With none left, it is a leftover.
func TestHostTriageMPSServer(t *testing.T) {
	server := proc(900, 5, "nvidia-cuda-mps", "/usr/bin/nvidia-cuda-mps-server", mapping("/dev/nvidia0", "rw-s", 0x7f0000000000, 1<<20, 0, "195:0"))
	client := proc(901, 7, "python3", "/usr/bin/python3.11", holder(3, ctl, "rw", ctlNo), func(p *snapshot.Process) { p.SlurmJobID = "77" })
	listed := gp(901, 4*gib)
	for _, c := range []struct {
		name  string
		host  *snapshot.Snapshot
		class string
		next  string
		why   string
	}{
		{"serving", withGPUs(snap("ps", server, client), mpsGPU(0, 28*mib, listed)), ClassTenant,
			"leave it while its clients run (killing it fails their work); once they are done, echo quit | nvidia-cuda-mps-control", "its client 901 belongs to slurm job 77"},
		{"alone", withGPUs(snap("ps", server), mpsGPU(0, 28*mib)), ClassLeftoverWorker,
			"echo quit | nvidia-cuda-mps-control (or echo shutdown_server 900 | nvidia-cuda-mps-control to stop this server alone)", "it serves no one"},
	} {
		got := HostTriage(c.host)(&c.host.Processes[0])
		why := strings.Join(got.Why, "\n")
		if got.Class != c.class || !strings.HasPrefix(got.Next, c.next) || !strings.Contains(why, "CUDA MPS's server") || !strings.Contains(why, c.why) {
			t.Errorf("%s: %+v, want %s, next %q, why naming %q", c.name, got, c.class, c.next, c.why)
		}
	}
}
