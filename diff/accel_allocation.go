package diff

import (
	"fmt"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// The allocation rule on other vendors' accelerators finds a process of the
// tenant that works on one (engine time or device memory in its DRM
// fdinfo, or KFD memory on it) that the allocation does not name. Holding a
// node is not work, so a browser's render node raises nothing here.

// accelAllocation decides whether the allocation can judge other vendors'
// accelerators, and notes why not. It names them (GPUSet.Accel), gives no
// GPU, or names NVIDIA's GPUs that NVML showed (a mixed host, where any
// other device is outside). GPU numbers that NVML did not show may be a
// Slurm index of another vendor's device, which gres.conf alone maps, so
// they are not judged.
func (c *comparison) accelAllocation(alloc snapshot.GPUSet, gpus *gpuSet, tenant string) bool {
	if c.toAccel == nil && c.fromAccel == nil {
		return false
	}
	gpus.resolveAccel(alloc, c.toAccel, c.fromAccel)
	for _, id := range gpus.accelUnresolved {
		c.notes = append(c.notes, "allocation of "+tenant+" names "+id+", which no accelerator read from the sys root has as an ID")
	}
	nvidia := len(alloc.Minors) + len(alloc.UUIDs)
	if len(alloc.Accel) > 0 || nvidia == 0 || len(c.toNVML.gpuByMinor)+len(c.fromNVML.gpuByMinor) > 0 {
		return true
	}
	c.notCompared("allocation of " + tenant + " (" + alloc.String() + ") names GPU numbers that NVML did not show: other vendors' accelerators were not judged against it (give their IDs, amd:N or a PCI slot)")
	return false
}

// accelOutside reports each accelerator that p works on outside the set,
// once per process and device (seen).
func (c *comparison) accelOutside(p *snapshot.Process, ax *accelIndex, gpus *gpuSet, what string, base []string, seen map[string]bool) []Finding {
	var out []Finding
	for _, u := range deviceUses(p, ax) {
		if !u.accelWork {
			continue
		}
		for _, name := range u.accelDevs {
			key := p.Key() + "/" + name
			if gpus.accel[name] || seen[key] {
				continue
			}
			seen[key] = true
			d := ax.byName(name)
			ev := append(append(append([]string{}, base...), "device: "+d.Vendor+" "+d.Name+", ids "+strings.Join(d.IDs, ", ")),
				append(append(mappingEvidence(u.mappings), holderEvidence(u.holders)...), accelEvidenceOf(ax, p, u)...)...)
			out = append(out, c.allocationFinding(p, u.device, "",
				fmt.Sprintf("works on %s %s through %s%s", d.Vendor, d.Name, u.device, what), ev))
		}
	}
	return out
}

// byName is the device of this snapshot named name, or nil.
func (ax *accelIndex) byName(name string) *snapshot.Accelerator {
	for i := range ax.a.Devices {
		if ax.a.Devices[i].Name == name {
			return &ax.a.Devices[i]
		}
	}
	return nil
}
