package snapshot

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Accelerators is what the kernel showed of the host's accelerators other
// than NVIDIA's, whose view is NVML's. It holds the DRM and accel devices
// from sysfs, AMD's compute interface (KFD) and the processes it serves.
// Package capture/accel reads it, one file per vendor, and the rules on it
// are vendor-neutral. Nil in a snapshot that read no sys root.
type Accelerators struct {
	// SysRoot is the directory read as /sys.
	SysRoot string        `json:"sys_root"`
	Devices []Accelerator `json:"devices,omitempty"`
	// KFDNode is the device number of /dev/kfd where the kernel has one.
	KFDNode DeviceNumber `json:"kfd_node,omitzero"`
	// KFDProcesses are the processes KFD serves (/sys/class/kfd/kfd/proc/PID),
	// an exited one's included while the kernel still keeps its memory.
	KFDProcesses []KFDProcess `json:"kfd_processes,omitempty"`
	// Errors name what could not be read.
	Errors []string `json:"errors,omitempty"`
}

// Accelerator is one device, a PCI function (or a virtual device), with
// its DRM or accel nodes.
type Accelerator struct {
	// Vendor is amd, intel or habana. Another vendor is named by its PCI
	// vendor id ("0x1af4"), or by its driver's name for a device on no PCI bus.
	Vendor  string `json:"vendor"`
	Driver  string `json:"driver,omitempty"`   // the bound driver, from sysfs
	PCISlot string `json:"pci_slot,omitempty"` // 0000:03:00.0; "" for a virtual device
	// Name is how findings name the device, its PCI slot or else its
	// sysfs device directory's name.
	Name  string      `json:"name"`
	Nodes []AccelNode `json:"nodes"`
	// IDs are the names a scheduler or an operator gives the device by.
	// They are VENDOR:N (its index among its vendor's devices in PCI slot
	// order, as ROCm and Level Zero count them), its PCI slot, and its DRM
	// card node's name (Intel's device plugin's). A GPUSet's Accel holds them.
	IDs []string `json:"ids,omitempty"`
	// KFDGPUID is KFD's id of the device (topology/nodes/N/gpu_id), which
	// names it in KFD's per-process files. It is 0 when KFD does not serve it.
	KFDGPUID uint32 `json:"kfd_gpu_id,omitempty"`
	// MemoryTotal and MemoryUsed are the device memory in bytes, where the
	// driver gives them in sysfs (amdgpu's mem_info_vram_total and _used).
	MemoryTotal *uint64 `json:"memory_total,omitempty"`
	MemoryUsed  *uint64 `json:"memory_used,omitempty"`
	// PerProcess names what the kernel tells per process of this device
	// ("drm fdinfo", "kfd"). Missing says what it does not tell.
	PerProcess []string `json:"per_process,omitempty"`
	Missing    string   `json:"missing,omitempty"`
}

// AccelNode is one device node of an accelerator.
type AccelNode struct {
	Path         string       `json:"path"` // /dev/dri/renderD128
	DeviceNumber DeviceNumber `json:"device_number"`
	Kind         string       `json:"kind"` // NodeCard, NodeRender, NodeAccel
}

// Kinds of accelerator nodes (AccelNodeKind).
const (
	NodeCard   = "card"   // a DRM primary node, /dev/dri/cardN, which display servers hold
	NodeRender = "render" // a DRM render node, /dev/dri/renderDN, for unprivileged GPU work
	NodeAccel  = "accel"  // a compute accelerator node, /dev/accel/accelN
	NodeKFD    = "kfd"    // AMD's compute interface, /dev/kfd
)

// The fixed character majors of DRM and accel nodes.
const (
	DRMMajor   = 226
	AccelMajor = 261
)

// drmRenderMinBase is the first minor of DRM render nodes (renderD128).
const drmRenderMinBase = 128

// AccelNodeKind says which accelerator node a device is (a NodeX), or ""
// for none. It goes by the device number where known (kfd is the number
// KFD gave /dev/kfd), else by the last element of its path in a dev
// directory.
func AccelNodeKind(path string, devno, kfd DeviceNumber) string {
	switch {
	case !kfd.IsZero() && devno == kfd:
		return NodeKFD
	case devno.Major == DRMMajor && devno.Minor >= drmRenderMinBase:
		return NodeRender
	case devno.Major == DRMMajor:
		return NodeCard
	case devno.Major == AccelMajor:
		return NodeAccel
	case !devno.IsZero():
		return ""
	}
	dir, base := splitPath(path)
	parent := lastElem(dir)
	switch {
	case base == "kfd" && parent == "dev":
		return NodeKFD
	case parent == "dri" && strings.HasPrefix(base, "renderD"):
		return NodeRender
	case parent == "dri" && strings.HasPrefix(base, "card"):
		return NodeCard
	case parent == "accel" && strings.HasPrefix(base, "accel"):
		return NodeAccel
	}
	return ""
}

// KFDProcess is one process KFD serves, by its host PID.
type KFDProcess struct {
	PID int `json:"pid"`
	// VRAM is the device memory it holds per GPU (vram_<gpu_id>), in bytes.
	VRAM []KFDMemory `json:"vram,omitempty"`
}

// KFDMemory is a KFD process's memory on one GPU.
type KFDMemory struct {
	GPUID uint32 `json:"gpu_id"`
	Bytes uint64 `json:"bytes"`
}

// DRMClient is one open DRM (or accel) file of a process, as its fdinfo
// tells it (the kernel's drm-usage-stats keys). Fds dup'ed or passed share
// one file and one client id, so it counts once.
type DRMClient struct {
	ClientID uint64 `json:"client_id"`          // drm-client-id
	Driver   string `json:"driver"`             // drm-driver
	PCISlot  string `json:"pci_slot,omitempty"` // drm-pdev
	Node     string `json:"node"`               // the holder's path
	FDs      []int  `json:"fds"`
	TID      int    `json:"tid,omitempty"` // as Holder.TID
	// Memory is per memory region, and Engines the busy time per engine.
	Memory  []DRMMemory `json:"memory,omitempty"`
	Engines []DRMEngine `json:"engines,omitempty"`
}

// DRMMemory is one memory region of a DRM client in bytes, from drm-total-
// (or the older drm-memory-), drm-resident- and drm-shared-.
type DRMMemory struct {
	Region   string `json:"region"`
	Total    uint64 `json:"total"`
	Resident uint64 `json:"resident,omitempty"`
	Shared   uint64 `json:"shared,omitempty"`
	// Device says the region is the device's own memory (VRAM), as its
	// vendor names regions.
	Device bool `json:"device,omitempty"`
}

// DRMEngine is one engine's use by a DRM client, as drm-engine- busy time,
// or drm-cycles- and drm-total-cycles- where the driver counts cycles (xe).
type DRMEngine struct {
	Name        string `json:"name"`
	BusyNS      uint64 `json:"busy_ns,omitempty"`
	Cycles      uint64 `json:"cycles,omitempty"`
	TotalCycles uint64 `json:"total_cycles,omitempty"`
	Capacity    uint64 `json:"capacity,omitempty"`
}

// DeviceMemory is the client's device memory, the sum of its regions that
// are the device's own.
func (c *DRMClient) DeviceMemory() uint64 {
	var n uint64
	for _, m := range c.Memory {
		if m.Device {
			n += m.Total
		}
	}
	return n
}

// Busy reports whether any engine ran work for the client.
func (c *DRMClient) Busy() bool {
	for _, e := range c.Engines {
		if e.BusyNS > 0 || e.Cycles > 0 {
			return true
		}
	}
	return false
}

// Working reports whether the client did GPU work, that is device memory or
// engine time. Holding a node is not work, as a compositor holds one.
func (c *DRMClient) Working() bool { return c.DeviceMemory() > 0 || c.Busy() }

// AcceleratorWork reports whether the process works on an accelerator
// other than NVIDIA's, as a recorded (nil when none was recorded). It does
// if it holds or maps /dev/kfd, or a DRM client of its has device memory
// or engine time. ps lists such a process, and a capture reads its triage
// evidence, as an NVIDIA device's user.
func (p *Process) AcceleratorWork(a *Accelerators) bool {
	if a == nil {
		return false
	}
	for i := range p.DRMClients {
		if p.DRMClients[i].Working() {
			return true
		}
	}
	for _, h := range p.Holders {
		if AccelNodeKind(h.Target, h.DeviceNumber, a.KFDNode) == NodeKFD {
			return true
		}
	}
	for _, m := range p.Mappings {
		if AccelNodeKind(m.Path, m.DeviceNumber, a.KFDNode) == NodeKFD {
			return true
		}
	}
	return false
}

// AccelVendors are the vendors an accelerator ID may name (VENDOR:N).
var AccelVendors = []string{"amd", "intel", "habana"}

// pciSlot and cardName match the other forms of an accelerator ID.
var (
	pciSlot  = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
	cardName = regexp.MustCompile(`^card[0-9]{1,3}$`)
)

// accelItem reports whether a GPU list's item names another vendor's
// accelerator by VENDOR:..., a PCI slot or a card node's name.
func accelItem(item string) bool {
	vendor, _, ok := strings.Cut(item, ":")
	return ok && slices.Contains(AccelVendors, vendor) || pciSlot.MatchString(item) || cardName.MatchString(item)
}

// accelIDs reads one accelerator item, one of VENDOR:N, VENDOR:N-M (each
// index), VENDOR:GPU-... (a vendor's UUID), a PCI slot or a card name.
func accelIDs(item string) ([]string, error) {
	vendor, rest, ok := strings.Cut(item, ":")
	if !ok || !slices.Contains(AccelVendors, vendor) {
		return []string{item}, nil // a PCI slot or card name, as matched
	}
	if strings.HasPrefix(rest, "GPU-") {
		if len(rest) > maxUUIDLen || !validUUID(rest) {
			return nil, fmt.Errorf("GPU list: %q is not a GPU UUID", item)
		}
		return []string{item}, nil
	}
	lo, hi, err := minorRange(rest)
	if err != nil {
		return nil, fmt.Errorf("GPU list: %q is not VENDOR:N, VENDOR:N-M or a VENDOR:GPU- UUID", item)
	}
	ids := make([]string, 0, hi-lo+1)
	for n := lo; n <= hi; n++ {
		ids = append(ids, vendor+":"+strconv.Itoa(n))
	}
	return ids, nil
}

// NamedBy reports whether id is one of the device's IDs.
func (d *Accelerator) NamedBy(id string) bool { return slices.Contains(d.IDs, id) }
