package diff

import (
	"slices"
	"strconv"

	"github.com/gpusnap/gpusnap/snapshot"
)

// gpuSet is a snapshot.GPUSet resolved against NVML. Each GPU is known by its
// minor number and its UUID wherever NVML linked the two, so a device node
// (a minor) and an NVML process list (a UUID) are matched against the same
// set. A MIG UUID names its parent GPU's minor, since a MIG instance's
// processes open its parent's /dev/nvidiaN.
type gpuSet struct {
	all    bool // no list given, so every GPU and every NVIDIA device
	minors map[int]bool
	uuids  map[string]bool
	// unresolved are the UUIDs NVML did not show, which a device node
	// cannot be matched against.
	unresolved []string
	// accel are the other vendors' accelerators in the set, by device name
	// (snapshot.Accelerator.Name), and accelUnresolved the set's IDs that
	// name none (resolveAccel).
	accel           map[string]bool
	accelUnresolved []string
}

// allGPUs is the set of every GPU, as check takes it without --gpus.
var allGPUs = &gpuSet{all: true}

// resolveGPUs resolves s against NVML's devices at each end given.
func resolveGPUs(s snapshot.GPUSet, ixs ...*nvmlIndex) *gpuSet {
	g := &gpuSet{minors: make(map[int]bool), uuids: make(map[string]bool)}
	for _, n := range s.Minors {
		g.minors[n] = true
	}
	for _, u := range s.UUIDs {
		g.uuids[u] = true
	}
	for _, ix := range ixs {
		for minor, gpu := range ix.gpuByMinor {
			in := g.minors[minor] || g.uuids[gpu.UUID]
			for _, m := range gpu.MIGDevices {
				in = in || (m.UUID != "" && g.uuids[m.UUID])
			}
			if in {
				g.minors[minor] = true
				if gpu.UUID != "" {
					g.uuids[gpu.UUID] = true
				}
			}
		}
	}
	for _, u := range s.UUIDs {
		if !g.resolved(u, ixs) {
			g.unresolved = append(g.unresolved, u)
		}
	}
	return g
}

// resolveAccel resolves the set's accelerator IDs against the devices of
// each end given, by their IDs.
func (g *gpuSet) resolveAccel(s snapshot.GPUSet, axs ...*accelIndex) {
	g.accel = make(map[string]bool)
	for _, id := range s.Accel {
		found := false
		for _, ax := range axs {
			if ax == nil {
				continue
			}
			for i := range ax.a.Devices {
				if d := &ax.a.Devices[i]; d.NamedBy(id) {
					g.accel[d.Name], found = true, true
				}
			}
		}
		if !found {
			g.accelUnresolved = append(g.accelUnresolved, id)
		}
	}
}

// resolved reports whether NVML at some end showed the UUID with a minor number.
func (g *gpuSet) resolved(uuid string, ixs []*nvmlIndex) bool {
	for _, ix := range ixs {
		for _, gpu := range ix.gpuByMinor {
			if gpu.UUID == uuid {
				return true
			}
			for _, m := range gpu.MIGDevices {
				if m.UUID == uuid {
					return true
				}
			}
		}
	}
	return false
}

// hasDevice reports whether a device use falls on the set, as a GPU node of a
// listed minor, an accelerator of the set worked on or its node held
// (idleAccelHolder), or, for the set of all GPUs, any NVIDIA device
// (nvidiactl and nvidia-uvm serve every GPU) and any accelerator node
// worked on or held.
func (g *gpuSet) hasDevice(u *deviceUse) bool {
	accel := u.gpuWork() && !u.nvidia() || u.idleAccelHolder() && len(u.holders) > 0
	switch {
	case g.all:
		return u.nvidia() || accel
	case u.accelKind != "":
		return accel && slices.ContainsFunc(u.accelDevs, func(name string) bool { return g.accel[name] })
	}
	return u.nvidia() && u.gpuMinor != nil && g.minors[*u.gpuMinor]
}

// hasPool reports whether an NVML pool (a GPU or a MIG instance) is in the set.
func (g *gpuSet) hasPool(p *pool) bool {
	return g.all || (p.minor != nil && g.minors[*p.minor]) || (p.uuid != "" && g.uuids[p.uuid])
}

// gpuName names the GPU of a device use or a pool in a finding, as "GPU 3".
func gpuName(minor *int, uuid string) string {
	switch {
	case minor != nil && uuid != "":
		return "GPU " + strconv.Itoa(*minor) + " (" + uuid + ")"
	case minor != nil:
		return "GPU " + strconv.Itoa(*minor)
	case uuid != "":
		return "GPU " + uuid
	}
	return "an NVIDIA device"
}
