package snapshot

import (
	"path"
	"slices"
	"strings"
)

// MPSServerExe is the executable of CUDA MPS's server. The control daemon
// (nvidia-cuda-mps-control) starts one under the UID of its first client. It
// owns the GPU contexts its clients' work runs in, and NVML lists it as a
// compute process beside the clients it lists on the MPS list.
const MPSServerExe = "nvidia-cuda-mps-server"

// MPSServer reports whether p runs CUDA MPS's server, that is its exe, not
// deleted, is named nvidia-cuda-mps-server and its comm is that name cut to
// 15 bytes. A tenant can name a process so, which the callers bound.
// Credits credits such a process less, never more, and diff asks for more
// before it spares one.
func (p *Process) MPSServer() bool {
	const commLen = 15 // TASK_COMM_LEN less its NUL
	return p != nil && !p.ExeDeleted && path.Base(p.Exe) == MPSServerExe && p.Comm == MPSServerExe[:commLen]
}

// Credits are the memory each of uses (merged per PID) accounts for on its
// GPU or MIG device, NVML's figure or nil where it gave none. An MPS server
// whose figure covers its clients' on the MPS list, as some drivers count, is
// credited its figure less their known ones. A gone client's held memory is
// then no live process's.
func Credits(uses []GPUProcessUse) []*uint64 {
	out := make([]*uint64, len(uses))
	var clients uint64
	for _, u := range uses {
		if u.UsedGPUMemory != nil && slices.Contains(strings.Split(u.Types, "+"), "M") && !u.Process.MPSServer() {
			clients += *u.UsedGPUMemory
		}
	}
	for i, u := range uses {
		out[i] = u.UsedGPUMemory
		if u.UsedGPUMemory != nil && clients > 0 && *u.UsedGPUMemory >= clients && u.Process.MPSServer() {
			own := *u.UsedGPUMemory - clients
			out[i] = &own
		}
	}
	return out
}
