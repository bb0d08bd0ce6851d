package diff

import (
	"fmt"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// The rules on accelerators other than NVIDIA's read what capture/accel
// recorded (snapshot.Accelerators, Process.DRMClients), never a vendor's
// names. That is a node's kind, a DRM client's device memory and engine
// time, KFD's memory per process, and a device's memory used where sysfs
// gives it.

// accelIndex indexes one snapshot's accelerators, nil where it read none.
type accelIndex struct {
	a      *snapshot.Accelerators
	byNode map[snapshot.DeviceNumber]*snapshot.Accelerator
	byPath map[string]*snapshot.Accelerator
	kfdPID map[int]*snapshot.KFDProcess
}

func indexAccel(a *snapshot.Accelerators) *accelIndex {
	if a == nil {
		return nil
	}
	ax := &accelIndex{a: a, byNode: map[snapshot.DeviceNumber]*snapshot.Accelerator{},
		byPath: map[string]*snapshot.Accelerator{}, kfdPID: map[int]*snapshot.KFDProcess{}}
	for i := range a.Devices {
		d := &a.Devices[i]
		for _, n := range d.Nodes {
			ax.byNode[n.DeviceNumber] = d
			ax.byPath[n.Path] = d
		}
	}
	for i := range a.KFDProcesses {
		ax.kfdPID[a.KFDProcesses[i].PID] = &a.KFDProcesses[i]
	}
	return ax
}

// nodeKind is the accelerator node kind of a device (snapshot.NodeX), or "".
func (ax *accelIndex) nodeKind(path string, devno snapshot.DeviceNumber) string {
	if ax == nil {
		return ""
	}
	return snapshot.AccelNodeKind(path, devno, ax.a.KFDNode)
}

// device is the accelerator a node belongs to, by number, else by path.
func (ax *accelIndex) device(path string, devno snapshot.DeviceNumber) *snapshot.Accelerator {
	if d := ax.byNode[devno]; d != nil && !devno.IsZero() {
		return d
	}
	return ax.byPath[path]
}

// markAccel sets, on each use of an accelerator node, its kind, whether
// the process did work there (KFD is compute by itself, and on a DRM or
// accel node, a client of the node with device memory or engine time), and
// the devices it is on.
func (ax *accelIndex) markAccel(p *snapshot.Process, uses []*deviceUse) {
	for _, u := range uses {
		u.accelKind = ax.nodeKind(u.device, u.devno)
		switch u.accelKind {
		case "":
		case snapshot.NodeKFD:
			u.accelWork = true
			if kp := ax.kfdPID[p.PID]; kp != nil {
				for _, m := range kp.VRAM {
					if d := ax.kfdGPU(m.GPUID); d != nil && m.Bytes > 0 {
						u.accelDevs = append(u.accelDevs, d.Name)
					}
				}
			}
		default:
			for i := range p.DRMClients {
				if p.DRMClients[i].Node == u.device && p.DRMClients[i].Working() {
					u.accelWork = true
				}
			}
			if d := ax.device(u.device, u.devno); d != nil {
				u.accelDevs = []string{d.Name}
			}
		}
	}
}

// accelHolder reports whether a holder is of an accelerator node.
func (ax *accelIndex) accelHolder(h *snapshot.Holder) bool {
	return ax.nodeKind(h.Target, h.DeviceNumber) != ""
}

// gpuWork reports whether a use is GPU work, on an NVIDIA device or an
// accelerator node the process worked on.
func (u *deviceUse) gpuWork() bool { return u.nvidia() || u.accelWork }

// idleAccelHolder reports whether a use holds a DRM render or accel node
// with no work on it. That is worth a look, not a GPU leftover (display
// servers, browsers and compositors hold render nodes). An idle primary node
// (cardN) is left out, as it is the display's.
func (u *deviceUse) idleAccelHolder() bool {
	return !u.accelWork && (u.accelKind == snapshot.NodeRender || u.accelKind == snapshot.NodeAccel)
}

// accelEvidence renders what the kernel said of the process's work on the
// use's node, its DRM clients there and for KFD its memory per GPU.
func (c *comparison) accelEvidence(p *snapshot.Process, u *deviceUse) []string {
	return accelEvidenceOf(c.toAccel, p, u)
}

// accelEvidenceOf is accelEvidence in the snapshot ax indexes.
func accelEvidenceOf(ax *accelIndex, p *snapshot.Process, u *deviceUse) []string {
	var out []string
	if u.accelKind == snapshot.NodeKFD {
		if kp := ax.kfdPID[p.PID]; kp != nil {
			for _, m := range kp.VRAM {
				out = append(out, fmt.Sprintf("kfd: vram %s on gpu_id %d", bytesText(m.Bytes), m.GPUID))
			}
		}
		return out
	}
	for i := range p.DRMClients {
		if cl := &p.DRMClients[i]; cl.Node == u.device {
			out = append(out, clientEvidence(cl))
		}
	}
	return out
}

// clientEvidence is one DRM client in a line, as its fdinfo told it.
func clientEvidence(cl *snapshot.DRMClient) string {
	parts := []string{fmt.Sprintf("drm client %d of %s", cl.ClientID, cl.Driver)}
	if cl.PCISlot != "" {
		parts[0] += " on " + cl.PCISlot
	}
	for _, m := range cl.Memory {
		s := fmt.Sprintf("%s %s", m.Region, bytesText(m.Total))
		if m.Resident > 0 {
			s += " (resident " + bytesText(m.Resident) + ")"
		}
		parts = append(parts, s)
	}
	for _, e := range cl.Engines {
		switch {
		case e.BusyNS > 0:
			parts = append(parts, fmt.Sprintf("engine %s %d ns", e.Name, e.BusyNS))
		case e.Cycles > 0:
			parts = append(parts, fmt.Sprintf("engine %s %d cycles", e.Name, e.Cycles))
		}
	}
	return strings.Join(parts, ", ")
}

// accelInUse is the severity of a check's gpu_in_use of an accelerator node
// and how its summary names the device. It is high where the process works
// on it, low where it only holds a render or accel node.
func (c *comparison) accelInUse(u *deviceUse) (Severity, string) {
	name := u.accelKind + " node"
	if u.accelKind == snapshot.NodeKFD {
		name = "kfd, every AMD GPU it serves"
	}
	if d := c.toAccel.device(u.device, u.devno); d != nil {
		name = d.Vendor + " " + d.Name
	}
	if !u.accelWork {
		return Low, name + ", no device memory or engine time"
	}
	return High, name
}

// zombieNext is what to do about memory that no process holds, which is to
// reset the GPU by NVIDIA's tool or, for another vendor's device (a finding
// that names a device and no NVIDIA UUID), by that vendor's.
func zombieNext(f *Finding) string {
	if f.GPUUUID == "" && f.Device != "" {
		return "nothing to kill: drain the node, then reset the device (amd-smi reset --gpureset for AMD's) or reboot it to free the memory"
	}
	return "nothing to kill: drain the node, then reset the GPU (nvidia-smi -r -i N) or reboot it to free the memory"
}

// accelMemory reports an accelerator whose device memory that no live
// process accounts for (sysfs used less unaccountedAccel's sum) grew since
// FROM past the zombie threshold, as zombie_gpu_memory. A check compares
// with nothing unaccounted.
func accelMemory(c *comparison) []Finding {
	if c.toAccel == nil {
		return nil
	}
	var out []Finding
	for i := range c.toAccel.a.Devices {
		d := &c.toAccel.a.Devices[i]
		if d.MemoryUsed == nil {
			continue
		}
		now, lines := c.unaccountedAccel(c.to, c.toAccel, d)
		var before int64
		if !c.check {
			prior := c.fromAccel.sameDevice(d)
			if prior == nil || prior.MemoryUsed == nil {
				c.notCompared(d.Vendor + " " + d.Name + " lacks a memory figure at FROM: its memory was not compared")
				continue
			}
			before, _ = c.unaccountedAccel(c.from, c.fromAccel, prior)
		}
		growth := now - before
		if growth <= int64(c.opts.ZombieThreshold) {
			continue
		}
		ev := append([]string{fmt.Sprintf("memory used %s of %s (sysfs); unaccounted %s at TO, %s at FROM",
			bytesText(*d.MemoryUsed), bytesText(deref(d.MemoryTotal)), bytesText(uint64(max(now, 0))), bytesText(uint64(max(before, 0))))}, lines...)
		out = append(out, Finding{
			Kind:     KindZombieGPUMemory,
			Severity: High,
			Summary: fmt.Sprintf("%s %s holds %s of device memory that no live process accounts for, %s more than at FROM",
				d.Vendor, d.Name, bytesText(uint64(now)), bytesText(uint64(growth))),
			Device:   d.Name,
			Evidence: ev,
		})
	}
	return out
}

func deref(n *uint64) uint64 {
	if n == nil {
		return 0
	}
	return *n
}

// kfdGPU is the device KFD names gpu_id, or nil.
func (ax *accelIndex) kfdGPU(id uint32) *snapshot.Accelerator {
	for i := range ax.a.Devices {
		if d := &ax.a.Devices[i]; d.KFDGPUID == id && id != 0 {
			return d
		}
	}
	return nil
}

// sameDevice is the device of this snapshot that d is, by PCI slot, else by name.
func (ax *accelIndex) sameDevice(d *snapshot.Accelerator) *snapshot.Accelerator {
	if ax == nil {
		return nil
	}
	return ax.byName(d.Name)
}

// unaccountedAccel is device d's memory used less what the live processes
// of s account for, with a line per process that accounts for some. Each
// accounts for the larger of its KFD and its DRM clients' device memory
// (one buffer may be in both). A shared client counts once.
func (c *comparison) unaccountedAccel(s *snapshot.Snapshot, ax *accelIndex, d *snapshot.Accelerator) (int64, []string) {
	accounted := int64(0)
	var lines []string
	seen := map[string]bool{} // DRM clients already counted
	for i := range s.Processes {
		p := &s.Processes[i]
		if p.Defunct() {
			continue
		}
		var drm uint64
		for j := range p.DRMClients {
			cl := &p.DRMClients[j]
			key := fmt.Sprintf("%s %s %d", cl.Driver, cl.PCISlot, cl.ClientID)
			if seen[key] || ax.device(cl.Node, snapshot.DeviceNumber{}) != d && (cl.PCISlot == "" || cl.PCISlot != d.PCISlot) {
				continue
			}
			seen[key] = true
			drm += cl.DeviceMemory()
		}
		var kfd uint64
		if kp := ax.kfdPID[p.PID]; kp != nil && d.KFDGPUID != 0 {
			for _, m := range kp.VRAM {
				if m.GPUID == d.KFDGPUID {
					kfd += m.Bytes
				}
			}
		}
		if n := max(drm, kfd); n > 0 {
			accounted += int64(n)
			lines = append(lines, fmt.Sprintf("pid %d (%s, %s) accounts for %s (drm fdinfo %s, kfd %s)",
				p.PID, p.Comm, p.Key(), bytesText(n), bytesText(drm), bytesText(kfd)))
		}
	}
	return int64(*d.MemoryUsed) - accounted, lines
}
