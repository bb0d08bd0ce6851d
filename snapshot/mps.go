package snapshot

import (
	"path"
	"slices"
	"strings"
)

// MPSServerExe is the executable of CUDA MPS's server. The control daemon
// (nvidia-cuda-mps-control) starts one under the UID of its first client; it
// owns the GPU contexts its clients' work runs in, and NVML lists it as a
// compute process beside the clients it lists on the MPS list.
const MPSServerExe = "nvidia-cuda-mps-server"

// MPSServer reports whether p runs CUDA MPS's server: its exe is named
// nvidia-cuda-mps-server and was not deleted, and its comm is that name as
// the kernel keeps it (15 bytes). A tenant can name a process so; what the
// name changes is bounded in the callers (Credits credits such a process
// less, never more, and diff asks for more before it spares one).
func (p *Process) MPSServer() bool {
	const commLen = 15 // TASK_COMM_LEN less its NUL
	return p != nil && !p.ExeDeleted && path.Base(p.Exe) == MPSServerExe && p.Comm == MPSServerExe[:commLen]
}

// Credits are the memory each of uses (one GPU's or MIG device's, merged per
// PID and joined) accounts for there: NVML's figure for it, except for an MPS
// server whose figure is at least its clients' (the uses on the MPS list)
// together: a driver that counts their allocations under the server too. It
// is credited its figure less theirs. A client's allocations are the
// client's: a live client accounts for them once, and one that left with its
// memory still held leaves that memory to no live process, whatever the
// server's figure says. A credit is nil where NVML gave no figure; a
// client's unknown figure takes nothing from the server's.
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
