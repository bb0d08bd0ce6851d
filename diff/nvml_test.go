package diff

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

// TestPSAndDiffJoinAlike runs gpusnap ps's view (snapshot.GPUUsage) and diff
// on the same snapshots, where NVML lists PID 12. diff reports it an orphan
// exactly when ps finds no live process for it, and names the process ps
// joins it to. Both read NVML's PIDs through snapshot.PIDJoin.
func TestPSAndDiffJoinAlike(t *testing.T) {
	kthreadd := proc(2, 1, "kthreadd", "", func(p *snapshot.Process) { p.KernelThread, p.Exe, p.Cmdline = true, "", nil })
	inNamespace := func(pid int, comm, exe string, opts ...procOpt) snapshot.Process {
		return proc(pid, 700, comm, exe, append(opts, func(p *snapshot.Process) { p.NSpid = []int{pid, 12} })...)
	}
	trainer := inNamespace(4300, "python3", "/usr/bin/python3.11", holder(3, dev0, "rw", dev0No))
	twin := inNamespace(4302, "python3", "/usr/bin/python3.11", holder(3, dev0, "rw", dev0No))
	shell := inNamespace(4301, "bash", "/usr/bin/bash")
	zombie := proc(12, 600, "python3", "/usr/bin/python3.11", defunct)
	for _, tc := range []struct {
		name  string
		procs []snapshot.Process
		ps    int // the live process ps joins PID 12 to, 0 for none (an orphan)
		diff  []string
	}{
		{"namespaced PID of a process on the GPU", []snapshot.Process{trainer}, 4300,
			[]string{"leftover_device_holder high 4300 /dev/nvidia0", "unexpected_gpu_process medium 4300"}},
		{"namespaced PID of a process on no GPU", []snapshot.Process{shell}, 0,
			[]string{"orphan_gpu_process high 12", "zombie_gpu_memory high 0"}},
		{"host view: NVML's PIDs are the host's", []snapshot.Process{kthreadd, trainer}, 0,
			[]string{"leftover_device_holder high 4300 /dev/nvidia0", "orphan_gpu_process high 12", "zombie_gpu_memory high 0", "unexpected_gpu_process medium 4300"}},
		{"two processes on the GPU have it", []snapshot.Process{trainer, twin}, 0,
			[]string{"leftover_device_holder high 4300 /dev/nvidia0", "leftover_device_holder high 4302 /dev/nvidia0", "orphan_gpu_process high 12",
				"zombie_gpu_memory high 0", "unexpected_gpu_process medium 4300", "unexpected_gpu_process medium 4302"}},
		{"host view: only a zombie has it", []snapshot.Process{kthreadd, zombie}, 0,
			[]string{"orphan_gpu_process high 12", "zombie_gpu_memory high 0"}},
		{"a zombie has it as host PID, a process on the GPU further down", []snapshot.Process{zombie, trainer}, 4300,
			[]string{"leftover_device_holder high 4300 /dev/nvidia0", "unexpected_gpu_process medium 4300"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before []snapshot.Process
			if tc.procs[0].KernelThread {
				before = tc.procs[:1]
			}
			from := withGPUs(snap("a", before...), gpu(0))
			to := withGPUs(snap("b", tc.procs...), gpu(gib, gp(12, gib)))

			use := snapshot.GPUUsage(to)[0].Processes[0]
			ps := 0
			if use.Process != nil && (use.Join == snapshot.JoinPID || use.Join == snapshot.JoinNSpid) {
				ps = use.Process.PID
			}
			if ps != tc.ps {
				t.Errorf("ps joins PID 12 to %d (%s), want %d", ps, use.Join, tc.ps)
			}
			r := compare(from, to)
			expect(t, r, tc.diff...)
			orphan := slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Kind == KindOrphanGPUProcess })
			if orphan != (ps == 0) {
				t.Errorf("diff reports an orphan: %v; ps joins PID 12 to %d", orphan, ps)
			}
			if ps != 0 {
				i := slices.IndexFunc(r.Findings, func(f Finding) bool { return f.Kind == KindUnexpectedGPUProcess && f.Process.PID == ps })
				if i < 0 {
					t.Fatalf("diff does not name %d", ps)
				}
				if ev := strings.Join(r.Findings[i].Evidence, "\n"); !strings.Contains(ev, "lists pid 12 (host PID 4300, found through NSpid) as a compute process") {
					t.Errorf("evidence:\n%s", ev)
				}
			}
		})
	}
}
