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

// MPS on a MIG instance: NVML lists the server and its clients on the
// instance's own handle, the parent GPU lists them only to a privileged
// caller. The instance's MPS list makes its clients C+M there, so a live
// client accounts for its memory and one that left leaves it unaccounted.
func TestGPUUsageMPSOnMIG(t *testing.T) {
	on := int(1)
	list := func(pid int, mem uint64) snapshot.GPUProcess {
		return snapshot.GPUProcess{PID: pid, UsedGPUMemory: ptr(mem), GPUInstanceID: ptr(uint32(1)), ComputeInstanceID: ptr(uint32(0))}
	}
	gpu := snapshot.GPU{UUID: "GPU-0", MinorNumber: ptr(0), Memory: &snapshot.Memory{Total: 80 * gib, Used: 7 * gib}, MIGMode: &on,
		MIGDevices: []snapshot.MIGDevice{{GPUInstanceID: 1, UUID: "MIG-1", Memory: &snapshot.Memory{Total: 20 * gib, Used: 7 * gib},
			ComputeProcesses: []snapshot.GPUProcess{list(900, gib), list(901, 4*gib), list(902, 2*gib)},
			MPSProcesses:     []snapshot.GPUProcess{list(901, 4*gib), list(902, 2*gib)}}}}
	server := snapshot.Process{PID: 900, Comm: "nvidia-cuda-mps", Exe: "/usr/bin/nvidia-cuda-mps-server", Holders: ctl}
	client := snapshot.Process{PID: 901, Comm: "python3", Holders: ctl}
	for _, c := range []struct {
		name  string
		procs []snapshot.Process
		want  uint64
	}{
		{"server and clients", []snapshot.Process{server, client, {PID: 902, Comm: "python3", Holders: ctl}}, 0},
		{"a client left", []snapshot.Process{server, client}, 2 * gib},
	} {
		s := &snapshot.Snapshot{Processes: c.procs, NVML: snapshot.NVML{Devices: []snapshot.GPU{gpu}}}
		m := snapshot.GPUUsage(s)[0].MIG[0]
		if m.Unaccounted == nil || *m.Unaccounted != c.want {
			t.Errorf("%s: MIG unaccounted %v, want %d", c.name, m.Unaccounted, c.want)
		}
		if len(m.Processes) != 3 || m.Processes[1].Types != "C+M" {
			t.Fatalf("%s: MIG processes %+v", c.name, m.Processes)
		}
	}
	// An MPS list the instance could not give leaves its figure unknown.
	s := &snapshot.Snapshot{Processes: []snapshot.Process{server, client},
		NVML: snapshot.NVML{Devices: []snapshot.GPU{gpu}, Missing: map[string]string{snapshot.MIGKey(snapshot.DeviceKey(0), 0) + ".mps_processes": "not supported"}}}
	if m := snapshot.GPUUsage(s)[0].MIG[0]; m.Unaccounted != nil {
		t.Errorf("MPS list missing: MIG unaccounted %d, want unknown", *m.Unaccounted)
	}
}
