package diff

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

const mib = 1 << 20

// mpsServer is CUDA MPS's server as NVML and /proc show it, holding and
// mapping /dev/nvidia0 and holding /dev/nvidiactl, read-write.
func mpsServer(pid int, opts ...procOpt) snapshot.Process {
	return proc(pid, 600, "nvidia-cuda-mps", "/usr/bin/nvidia-cuda-mps-server", append([]procOpt{
		holder(3, dev0, "rw", dev0No), holder(4, ctl, "rw", ctlNo),
		mapping(dev0, "rw-s", 0x7f0000000000, 2<<20, 0, dev0No)}, opts...)...)
}

// mpsGPU is GPU 0 under MPS, with the server listed as a compute process with
// serverMem, each client (pid, bytes) on the compute and the MPS list, and
// used memory their sum where used is 0.
func mpsGPU(used, serverMem uint64, clients ...snapshot.GPUProcess) snapshot.GPU {
	sum := serverMem
	for _, c := range clients {
		sum += *c.UsedGPUMemory
	}
	if used == 0 {
		used = sum
	}
	g := gpu(used, append([]snapshot.GPUProcess{gp(900, serverMem)}, clients...)...)
	g.MPSProcesses = clients
	return g
}

// An MPS server with live clients serves them. It is no leftover of the
// tenant whose clients left, whoever's clients remain (here one of job
// 77's, itself a new GPU user). Left with no client, it is a leftover as
// any process is, and its triage says what it is and how to stop it.
func TestMPSServerLeftover(t *testing.T) {
	client := proc(901, 700, "python3", "/usr/bin/python3.11", holder(3, ctl, "rw", ctlNo), cgroups("0::/slurm/uid_1000/job_77/step_0"))
	client.SlurmJobID = "77"
	from := withGPUs(snap("a"), gpu(0))
	from.Tenant = "4242"
	for _, tc := range []struct {
		name  string
		to    *snapshot.Snapshot
		want  []string
		note  string
		class string
		next  string
	}{
		{"serving a live client",
			withGPUs(snap("b", mpsServer(900), client), mpsGPU(0, 28*mib, gp(901, 4*gib))),
			[]string{"leftover_device_holder high 901 /dev/nvidiactl", "unexpected_gpu_process medium 901"},
			"900@600 (nvidia-cuda-mps) is an MPS server with 1 live client at TO (pid 901)", ClassAnotherTenant, "slurm job 77"},
		{"its clients left",
			withGPUs(snap("b", mpsServer(900)), mpsGPU(0, 28*mib)),
			[]string{"leftover_device_holder high 900 /dev/nvidia0", "leftover_device_holder high 900 /dev/nvidiactl",
				"leftover_device_mapping high 900 /dev/nvidia0", "unexpected_gpu_process medium 900"},
			"", ClassLeftoverWorker, "echo quit | nvidia-cuda-mps-control"},
		// NVML lists a client no live process has, an orphan, and its
		// memory, which the driver counts under the server too, is a zombie.
		{"a client left its memory behind",
			withGPUs(snap("b", mpsServer(900)), mpsGPU(4*gib+28*mib, 4*gib+28*mib, gp(901, 4*gib))),
			[]string{"leftover_device_holder high 900 /dev/nvidia0", "leftover_device_holder high 900 /dev/nvidiactl",
				"leftover_device_mapping high 900 /dev/nvidia0", "orphan_gpu_process high 901", "zombie_gpu_memory high 0",
				"unexpected_gpu_process medium 900"},
			"", ClassLeftoverWorker, "shutdown_server 900"},
		{"another tenant's server, alone",
			withGPUs(snap("b", mpsServer(900, cgroups("0::/slurm/uid_1000/job_77/step_0"), func(p *snapshot.Process) { p.SlurmJobID = "77" })), mpsGPU(0, 28*mib)),
			[]string{"leftover_device_holder high 900 /dev/nvidia0", "leftover_device_holder high 900 /dev/nvidiactl",
				"leftover_device_mapping high 900 /dev/nvidia0", "unexpected_gpu_process medium 900"},
			"", ClassAnotherTenant, "it stops with echo quit | nvidia-cuda-mps-control"},
		// Named so from /tmp, with a live client, a renamed miner is not spared.
		{"a masquerading server",
			withGPUs(snap("b", proc(900, 600, "nvidia-cuda-mps", "/tmp/nvidia-cuda-mps-server", holder(3, dev0, "rw", dev0No)), client), mpsGPU(0, 28*mib, gp(901, 4*gib))),
			[]string{"leftover_device_holder high 900 /dev/nvidia0", "leftover_device_holder high 901 /dev/nvidiactl",
				"unexpected_gpu_process high 900", "unexpected_gpu_process medium 901"},
			"", ClassSuspectedCompromise, "contain the node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.to.Tenant = "4242"
			r := compare(from, tc.to)
			expect(t, r, tc.want...)
			notes := strings.Join(r.Notes, "\n")
			if tc.note != "" && !strings.Contains(notes, tc.note) || tc.note == "" && strings.Contains(notes, "MPS server") {
				t.Errorf("notes %q, want one naming %q", r.Notes, tc.note)
			}
			for _, f := range r.Findings {
				if f.Process == nil || f.Process.PID != 900 {
					continue
				}
				why := strings.Join(f.Triage.Why, "\n")
				if f.Triage.Class != tc.class || !strings.Contains(f.Triage.Next, tc.next) ||
					(tc.class != ClassSuspectedCompromise && !strings.Contains(why, "CUDA MPS's server")) {
					t.Errorf("%s: triage %+v, want %s naming %q", f.Kind, f.Triage, tc.class, tc.next)
				}
			}
			if f := r.Findings[0]; f.Process.PID == 901 && (f.Triage.Class != ClassAnotherTenant || strings.Contains(f.Triage.Next, "mps")) {
				t.Errorf("the client's triage %+v", f.Triage)
			}
		})
	}
}

// A server whose figure counts its clients' allocations too is credited
// its figure less theirs. The zombie's evidence says so, and the gone
// client's 4 GiB is unaccounted in diff as in ps.
func TestMPSZombieEvidence(t *testing.T) {
	to := withGPUs(snap("b", mpsServer(900)), mpsGPU(4*gib+28*mib, 4*gib+28*mib, gp(901, 4*gib)))
	r := compare(withGPUs(snap("a"), gpu(0)), to)
	var ev string
	for _, f := range r.Findings {
		if f.Kind == KindZombieGPUMemory {
			ev = strings.Join(f.Evidence, "\n")
		}
	}
	missing := slices.DeleteFunc([]string{
		"pid 900 (nvidia-cuda-mps, 900@600): 29360128 bytes (28.00 MiB) of the 4324327424 bytes (4.03 GiB) NVML lists for it (an MPS server",
		"pid 901: no live process, not counted: 4294967296 bytes (4.00 GiB)",
		"memory no live process accounts for at TO: 4294967296 bytes (4.00 GiB)",
		"unaccounted: +4294967296 bytes (4.00 GiB)",
	}, func(w string) bool { return strings.Contains(ev, w) })
	if len(missing) > 0 {
		t.Errorf("zombie evidence lacks %q:\n%s", missing, ev)
	}
}

// A check gates a GPU before it is handed out. An MPS server serving
// clients holds it, so it is in use, clients or not.
func TestMPSServerInUseAtCheck(t *testing.T) {
	client := proc(901, 700, "python3", "/usr/bin/python3.11", holder(3, ctl, "rw", ctlNo))
	r := Check(withGPUs(snap("b", mpsServer(900), client), mpsGPU(0, 28*mib, gp(901, 4*gib))), CheckOptions{ZombieThreshold: DefaultZombieThreshold})
	expect(t, r, "gpu_in_use high 900 /dev/nvidia0", "gpu_in_use high 900 /dev/nvidiactl", "gpu_in_use high 901", "gpu_in_use high 901 /dev/nvidiactl")
	for _, f := range r.Findings {
		if f.Process.PID == 900 && !strings.Contains(f.Triage.Next, "leave it while its clients run") {
			t.Errorf("the server's triage at check: %+v", f.Triage)
		}
	}
}

// TestMPSServerNotSparedByImpostors holds that a process named like the MPS
// server is spared only for clients it could really serve. Two tenant
// processes so named, each on the MPS list, do not vouch for each other. One
// that a client of the same user but started before it is listed beside
// serves no one (the control daemon starts a server for its first client).
// Each is judged as any process is, else the check is a false clean.
func TestMPSServerNotSparedByImpostors(t *testing.T) {
	fake := func(pid int, start uint64) snapshot.Process {
		return proc(pid, start, "nvidia-cuda-mps", "/home/tenant/bin/nvidia-cuda-mps-server",
			holder(3, dev0, "rw", dev0No), mapping(dev0, "rw-s", 0x7f0000000000, 2<<20, 0, dev0No))
	}
	from := withGPUs(snap("a"), gpu(0))
	g := gpu(8*gib, gp(950, 4*gib), gp(951, 4*gib))
	g.MPSProcesses = []snapshot.GPUProcess{gp(950, 4*gib), gp(951, 4*gib)}
	r := compare(from, withGPUs(snap("b", fake(950, 700), fake(951, 700)), g))
	for _, pid := range []int{950, 951} {
		if !hasFinding(r, KindLeftoverDeviceMapping, pid) {
			t.Errorf("mutual impostors: no leftover mapping of %d: %v, notes %q", pid, got(r), r.Notes)
		}
	}

	other := proc(901, 100, "python3", "/usr/bin/python3.11", holder(3, ctl, "rw", ctlNo), holder(4, dev0, "rw", dev0No))
	gf := gpu(4*gib, gp(901, 4*gib))
	gf.MPSProcesses = []snapshot.GPUProcess{gp(901, 4*gib)}
	gt := gpu(5*gib, gp(901, 4*gib), gp(950, gib))
	gt.MPSProcesses = []snapshot.GPUProcess{gp(901, 4*gib)}
	r = compare(withGPUs(snap("a", other), gf), withGPUs(snap("b", other, fake(950, 700)), gt))
	if !hasFinding(r, KindLeftoverDeviceMapping, 950) {
		t.Errorf("a borrowed older client: no leftover mapping of 950: %v, notes %q", got(r), r.Notes)
	}
}

func hasFinding(r *Result, kind string, pid int) bool {
	for _, f := range r.Findings {
		if f.Kind == kind && f.Process != nil && f.Process.PID == pid {
			return true
		}
	}
	return false
}
