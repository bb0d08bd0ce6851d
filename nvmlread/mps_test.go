package nvmlread

import (
	"reflect"
	"strconv"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/snapshot"
)

// A DGX H100 under CUDA MPS, read through the mock as from the driver: GPU
// 0's compute list holds the server and its clients, its MPS list the
// clients (nvidia-smi's M+C). The reader keeps both lists; the join credits
// each client its own memory, and the diff spares a server that serves a
// live client, judges one its clients left, and names another job's.
func TestReadNVMLMPS(t *testing.T) {
	const mib = 1 << 20
	serverProc := snapshot.Process{PID: 3100, StartTime: 62000, Comm: "nvidia-cuda-mps", Exe: "/usr/bin/nvidia-cuda-mps-server", UID: 1000,
		Holders: []snapshot.Holder{{FD: 3, Target: "/dev/nvidia0", Access: "rw", Class: snapshot.ClassNVIDIA, GPUMinor: ptr(0)}}}
	// A server serves its own user's clients: the control daemon starts it
	// under the UID of the first.
	client := snapshot.Process{PID: 4300, StartTime: 63000, Comm: "python3", Exe: "/usr/bin/python3.11", UID: 1000, SlurmJobID: "77",
		Cgroups: []string{"0::/slurm/uid_1001/job_77/step_0"}}
	job77 := serverProc
	job77.SlurmJobID, job77.Cgroups = "77", client.Cgroups
	for _, c := range []struct {
		name        string
		server      snapshot.Process
		clients     []nvml.ProcessInfo // on the MPS list, and the compute list
		live        []snapshot.Process
		unaccounted uint64
		want        []string // findings: kind pid triage class
	}{
		{"serving a live client", serverProc, []nvml.ProcessInfo{v1Process(4300, 4*gib)}, []snapshot.Process{client}, 0,
			[]string{"unexpected_gpu_process 4300 another_tenant"}},
		{"its clients left", serverProc, nil, nil, 0,
			[]string{"leftover_device_holder 3100 leftover_worker", "unexpected_gpu_process 3100 leftover_worker"}},
		{"another job's, its client gone", job77, []nvml.ProcessInfo{v1Process(4300, 4*gib)}, nil, 4 * gib,
			[]string{"leftover_device_holder 3100 another_tenant", "orphan_gpu_process 4300 zombie_context",
				"zombie_gpu_memory 0 zombie_context", "unexpected_gpu_process 3100 another_tenant"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := dgxh100.New()
			for _, d := range s.Devices {
				livetest.ServeGPU(d.(*server.Device))
			}
			// FROM: the same host before the tenant, nothing on its GPUs.
			from := &snapshot.Snapshot{ID: "from", Tenant: "4242", NVML: read(t, s)}
			d := s.Devices[0].(*server.Device)
			livetest.ServeGPU(d, append([]nvml.ProcessInfo{v1Process(3100, 28*mib)}, c.clients...)...)
			d.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return c.clients, nvml.SUCCESS }
			n := read(t, s)
			g := n.Devices[0]
			var wantMPS []snapshot.GPUProcess
			for _, p := range c.clients {
				wantMPS = append(wantMPS, snapshot.GPUProcess{PID: int(p.Pid), UsedGPUMemory: ptr(p.UsedGpuMemory)})
			}
			if !reflect.DeepEqual(g.MPSProcesses, wantMPS) || len(g.ComputeProcesses) != 1+len(c.clients) {
				t.Fatalf("MPS list %+v, compute list %+v", g.MPSProcesses, g.ComputeProcesses)
			}
			to := &snapshot.Snapshot{ID: "to", Tenant: "4242", Processes: append([]snapshot.Process{c.server}, c.live...), NVML: n}
			if u := snapshot.GPUUsage(to)[0].Unaccounted; u == nil || *u != c.unaccounted {
				t.Errorf("unaccounted %v, want %d", u, c.unaccounted)
			}
			r := diff.Compare(from, to, diff.Options{ZombieThreshold: diff.DefaultZombieThreshold})
			var got []string
			for _, f := range r.Findings {
				pid := 0
				if f.Process != nil {
					pid = f.Process.PID
				}
				got = append(got, f.Kind+" "+strconv.Itoa(pid)+" "+f.Triage.Class)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("findings %q, want %q; notes %q", got, c.want, r.Notes)
			}
		})
	}
}

// read reads lib as gpusnap does, its source recorded.
func read(t *testing.T, lib nvml.Interface) snapshot.NVML {
	t.Helper()
	n, err := (Options{Lib: lib}).ReadNVML()
	if err != nil {
		t.Fatal(err)
	}
	return n
}
