package snapshot_test

import (
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

func TestMPSServer(t *testing.T) {
	for _, c := range []struct {
		name string
		p    *snapshot.Process
		want bool
	}{
		{"packaged", &snapshot.Process{Comm: "nvidia-cuda-mps", Exe: "/usr/bin/nvidia-cuda-mps-server"}, true},
		{"a driver's own directory", &snapshot.Process{Comm: "nvidia-cuda-mps", Exe: "/opt/nvidia/bin/nvidia-cuda-mps-server"}, true},
		{"renamed", &snapshot.Process{Comm: "python3", Exe: "/usr/bin/nvidia-cuda-mps-server"}, false},
		{"deleted exe", &snapshot.Process{Comm: "nvidia-cuda-mps", Exe: "/usr/bin/nvidia-cuda-mps-server", ExeDeleted: true}, false},
		{"the control daemon", &snapshot.Process{Comm: "nvidia-cuda-mps", Exe: "/usr/bin/nvidia-cuda-mps-control"}, false},
		{"exe unread", &snapshot.Process{Comm: "nvidia-cuda-mps"}, false},
		{"no process", nil, false},
	} {
		if got := c.p.MPSServer(); got != c.want {
			t.Errorf("%s: MPSServer() = %v, want %v", c.name, got, c.want)
		}
	}
}

// Under MPS, NVML lists the server as a compute process with its own
// context's memory and each client on the MPS list (and, as nvidia-smi's
// M+C shows, the compute list) with its own. A client's memory is the
// client's: a live one accounts for it, and one that left while NVML still
// lists it leaves it unaccounted, even where the driver also counts the
// clients' memory under the server.
func TestGPUUsageMPS(t *testing.T) {
	const mib = uint64(1) << 20
	server := snapshot.Process{PID: 900, Comm: "nvidia-cuda-mps", Exe: "/usr/bin/nvidia-cuda-mps-server", Holders: ctl}
	clients := []snapshot.Process{{PID: 901, Comm: "python3", Holders: ctl}, {PID: 902, Comm: "python3", Holders: ctl}}
	list := func(pid int, mem uint64) snapshot.GPUProcess {
		return snapshot.GPUProcess{PID: pid, UsedGPUMemory: ptr(mem)}
	}
	gpu := func(used, serverMem uint64) snapshot.GPU {
		return snapshot.GPU{UUID: "GPU-0", MinorNumber: ptr(0), Memory: &snapshot.Memory{Total: 80 * gib, Used: used},
			ComputeProcesses: []snapshot.GPUProcess{list(900, serverMem), list(901, 4*gib), list(902, 2*gib)},
			MPSProcesses:     []snapshot.GPUProcess{list(901, 4*gib), list(902, 2*gib)}}
	}
	for _, c := range []struct {
		name       string
		gpu        snapshot.GPU
		procs      []snapshot.Process
		want       uint64
		serverGets uint64
	}{
		{"server and clients", gpu(6*gib+28*mib, 28*mib), append([]snapshot.Process{server}, clients...), 0, 28 * mib},
		{"a client left", gpu(6*gib+28*mib, 28*mib), []snapshot.Process{server, clients[0]}, 2 * gib, 28 * mib},
		{"clients' memory also the server's", gpu(6*gib+28*mib, 6*gib+28*mib), append([]snapshot.Process{server}, clients...), 0, 28 * mib},
		{"a client left, its memory also the server's", gpu(6*gib+28*mib, 6*gib+28*mib), []snapshot.Process{server, clients[0]}, 2 * gib, 28 * mib},
		// Named so, with a deleted exe: any process, credited all NVML gives it.
		{"not a server", gpu(6*gib+28*mib, 6*gib+28*mib), []snapshot.Process{{PID: 900, Comm: "nvidia-cuda-mps", Exe: server.Exe, ExeDeleted: true, Holders: ctl}, clients[0]}, 0, 6*gib + 28*mib},
	} {
		s := &snapshot.Snapshot{Processes: c.procs, NVML: snapshot.NVML{Devices: []snapshot.GPU{c.gpu}}}
		g := snapshot.GPUUsage(s)[0]
		if g.Unaccounted == nil || *g.Unaccounted != c.want {
			t.Errorf("%s: unaccounted %v, want %d", c.name, g.Unaccounted, c.want)
		}
		if len(g.Processes) != 3 || g.Processes[1].Types != "C+M" {
			t.Fatalf("%s: processes %+v", c.name, g.Processes)
		}
		if got := snapshot.Credits(g.Processes)[0]; got == nil || *got != c.serverGets {
			t.Errorf("%s: the server is credited %v, want %d", c.name, got, c.serverGets)
		}
	}
}
