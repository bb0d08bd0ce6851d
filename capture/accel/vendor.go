package accel

import (
	"cmp"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// vendor is what gpusnap knows of one vendor's accelerators. It says how
// their devices are named, which of their DRM memory regions are the
// device's own, and what their driver gives in sysfs. Each vendor has a file
// of its own (amd.go, intel.go, habana.go), and the rules read only the
// snapshot.
type vendor struct {
	name    string   // the snapshot's Vendor
	pciID   string   // the PCI vendor id as sysfs writes it ("0x1002")
	drivers []string // the DRM drivers that name it in fdinfo (drm-driver)
	// deviceRegion reports whether a DRM memory region (drm-total-REGION)
	// is the device's own memory.
	deviceRegion func(region string) bool
	// memory reads the device's memory total and used from its sysfs
	// device directory, where the driver gives them.
	memory func(s *sysfs, dev string) (total, used *uint64, err error)
	// missing says what the kernel does not tell per process for this
	// vendor's devices, "" when fdinfo tells memory and engine time.
	missing string
}

// nvidiaPCIID is NVIDIA's PCI vendor id. Its DRM nodes (nvidia-drm) are left
// to NVML, so a host with no other accelerator reads as before.
const nvidiaPCIID = "0x10de"

// vendors are the vendors gpusnap knows by name. Another device is recorded
// with its PCI id and what fdinfo gives.
var vendors = []*vendor{&amd, &intel, &habana}

func vendorByPCI(id string) *vendor {
	for _, v := range vendors {
		if v.pciID == id {
			return v
		}
	}
	return nil
}

func vendorByDriver(driver string) *vendor {
	for _, v := range vendors {
		for _, d := range v.drivers {
			if d == driver {
				return v
			}
		}
	}
	return nil
}

// noMemory is the memory reader of a driver that gives none in sysfs.
func noMemory(*sysfs, string) (total, used *uint64, err error) { return nil, nil, nil }

// noDeviceRegion is the region rule of a vendor whose DRM regions are all
// system memory, or unknown.
func noDeviceRegion(string) bool { return false }

// markDeviceRegions sets Device on each of the client's regions that its
// driver's vendor names device memory.
func markDeviceRegions(c *snapshot.DRMClient) {
	v := vendorByDriver(c.Driver)
	if v == nil {
		return
	}
	for i := range c.Memory {
		c.Memory[i].Device = v.deviceRegion(c.Memory[i].Region)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// nameDevices gives each device its IDs (snapshot.Accelerator.IDs). A known
// vendor's VENDOR:N comes first, N its place among that vendor's devices by
// PCI slot (the order ROCm and Level Zero enumerate them in), then its PCI
// slot and its card node's name, as device plugins hand them out.
func nameDevices(a *snapshot.Accelerators) {
	order := make([]*snapshot.Accelerator, len(a.Devices))
	for i := range a.Devices {
		order[i] = &a.Devices[i]
	}
	slices.SortStableFunc(order, func(x, y *snapshot.Accelerator) int {
		return cmp.Or(cmp.Compare(x.Vendor, y.Vendor), cmp.Compare(x.PCISlot, y.PCISlot), cmp.Compare(x.Name, y.Name))
	})
	index := map[string]int{}
	for _, d := range order {
		d.IDs = nil
		if slices.Contains(snapshot.AccelVendors, d.Vendor) {
			d.IDs = append(d.IDs, d.Vendor+":"+strconv.Itoa(index[d.Vendor]))
			index[d.Vendor]++
		}
		if d.PCISlot != "" {
			d.IDs = append(d.IDs, d.PCISlot)
		}
		for _, n := range d.Nodes {
			if n.Kind == snapshot.NodeCard && strings.HasPrefix(path.Base(n.Path), "card") {
				d.IDs = append(d.IDs, path.Base(n.Path))
			}
		}
	}
}
