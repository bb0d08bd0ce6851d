package nvmlread

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpusnap/gpusnap/internal/livetest"

	"github.com/gpusnap/gpusnap/snapshot"
)

// h100Host is a DGX H100 mock running 100 processes spread over its 8 GPUs.
func h100Host() *server.Server {
	s := dgxh100.New()
	procs := make([][]nvml.ProcessInfo, len(s.Devices))
	for pid := 0; pid < 100; pid++ {
		i := pid % len(s.Devices)
		procs[i] = append(procs[i], v1Process(uint32(10000+pid), gib))
	}
	for i, d := range s.Devices {
		livetest.ServeGPU(d.(*server.Device), procs[i]...)
	}
	return s
}

// BenchmarkReadNVML8x100 is what NVML adds to a snapshot on an 8-GPU host
// running 100 GPU processes (the budget: 5 ms), through the mock.
// The mock's own cost (moq records every call under a lock) is included.
func BenchmarkReadNVML8x100(b *testing.B) {
	s := h100Host()
	b.ReportAllocs()
	for b.Loop() {
		if n := readNVML(s, nil); len(n.Devices) != 8 {
			b.Fatal(len(n.Devices))
		}
	}
}

// BenchmarkGPUUsage8x100 is the join of that NVML state with 1,000 processes.
func BenchmarkGPUUsage8x100(b *testing.B) {
	snap := &snapshot.Snapshot{NVML: readNVML(h100Host(), nil)}
	for pid := 1; pid <= 1000; pid++ {
		snap.Processes = append(snap.Processes, snapshot.Process{PID: 9500 + pid, NSpid: []int{9500 + pid}})
	}
	b.ReportAllocs()
	for b.Loop() {
		if u := snapshot.GPUUsage(snap); len(u) != 8 {
			b.Fatal(len(u))
		}
	}
}
