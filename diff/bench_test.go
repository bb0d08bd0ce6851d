package diff

import (
	"fmt"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

// benchHost builds a host of n processes, each holding /dev/null, of which
// GPU users hold 2,000 device mappings in all (10 each, on nvidia devices
// and a DRM node) and a holder per NVIDIA device, on 8 GPUs that NVML lists
// them on. shift > 0 replaces that many GPU processes with new ones, so TO
// differs from FROM as after a tenant.
func benchHost(id string, n, shift int) *snapshot.Snapshot {
	const gpuUsers = 200
	procs := make([]snapshot.Process, 0, n)
	for i := range n {
		pid := 1000 + i
		start := uint64(10 * pid)
		if i < shift {
			start += 7 // the same PID, another process, so all new at TO
		}
		// Like every daemon, each holds /dev/null on its standard fds.
		p := proc(pid, start, "worker", "/usr/bin/worker", cgroups("0::/system.slice/worker.service"),
			holder(0, "/dev/null", "r", "1:3"), holder(1, "/dev/null", "w", "1:3"), holder(2, "/dev/null", "w", "1:3"))
		if i < gpuUsers {
			gpu := fmt.Sprintf("/dev/nvidia%d", i%8)
			for j := range 8 {
				mapping(gpu, "rw-s", uint64(0x7f0000000000+j*0x200000), 0x200000, uint64(j)*0x1000, fmt.Sprintf("195:%d", i%8))(&p)
			}
			mapping(ctl, "rw-s", 0x7f1000000000, pageLen, 0, ctlNo)(&p)
			mapping("/dev/dri/renderD128", "rw-s", 0x7f2000000000, pageLen, 0, "226:128")(&p)
			holder(3, gpu, "rw", fmt.Sprintf("195:%d", i%8))(&p)
			holder(4, ctl, "rw", ctlNo)(&p)
		}
		procs = append(procs, p)
	}
	s := snap(id, procs...)
	for g := range 8 {
		d := snapshot.GPU{Index: g, UUID: fmt.Sprintf("GPU-%d", g), MinorNumber: intp(g),
			Memory: &snapshot.Memory{Total: 80 << 30, Used: 25 * gib}}
		for i := g; i < gpuUsers; i += 8 {
			d.ComputeProcesses = append(d.ComputeProcesses, gp(1000+i, gib))
			d.ProcessUtilization = append(d.ProcessUtilization, snapshot.ProcessUtilization{PID: 1000 + i, SMUtil: 50})
		}
		s.NVML.Devices = append(s.NVML.Devices, d)
	}
	return s
}

// BenchmarkCompare compares two snapshots of 10,000 processes with 2,000
// device mappings each, 50 GPU processes replaced between them.
// docs/performance.md holds its target and its figures.
func BenchmarkCompare(b *testing.B) {
	from := benchHost("from", 10000, 0)
	to := benchHost("to", 10000, 50)
	r := Compare(from, to, Options{ZombieThreshold: DefaultZombieThreshold})
	if r.Summary.Total == 0 {
		b.Fatal("the benchmark hosts differ, yet no finding")
	}
	b.ReportAllocs()
	for b.Loop() {
		Compare(from, to, Options{ZombieThreshold: DefaultZombieThreshold})
	}
}
