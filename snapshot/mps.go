package snapshot

import "path"

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
// PID and joined) accounts for there: NVML's figure for it, except that an
// MPS server is credited at most with what the pool's used memory leaves
// once every other use's figure is taken out. A client's allocations are
// the client's: NVML lists each client with its own figure, so a driver that
// also counts them under the server credits them once, and a client that
// left with its memory still held leaves that memory to no live process. A
// credit is nil where NVML gave no figure; an unknown figure of another use
// takes nothing from the server's.
func Credits(m *Memory, uses []GPUProcessUse) []*uint64 {
	out := make([]*uint64, len(uses))
	var total uint64
	for _, u := range uses {
		if u.UsedGPUMemory != nil {
			total += *u.UsedGPUMemory
		}
	}
	for i, u := range uses {
		out[i] = u.UsedGPUMemory
		if u.UsedGPUMemory == nil || m == nil || !u.Process.MPSServer() {
			continue
		}
		others := total - *u.UsedGPUMemory
		left := uint64(0)
		if m.Used > others {
			left = m.Used - others
		}
		c := min(*u.UsedGPUMemory, left)
		out[i] = &c
	}
	return out
}
