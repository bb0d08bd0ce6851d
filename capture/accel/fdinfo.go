package accel

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// DRM fdinfo (/proc/PID/fdinfo/FD of a DRM or accel file) holds the
// kernel's drm-usage-stats keys beside pos, flags, mnt_id and ino. These
// are the keys read, each with what it says.
//
//	drm-driver: amdgpu
//	drm-client-id: 12          one per open file: dup'ed fds share it
//	drm-pdev: 0000:03:00.0     the PCI slot
//	drm-engine-gfx: 1234 ns    busy time (xe: drm-cycles-, drm-total-cycles-)
//	drm-total-vram: 8192 KiB   per region (older: drm-memory-), B/KiB/MiB
//
// A driver's own keys are ignored.

// ParseFdinfo reads a DRM client from an fdinfo text. ok is false when it is
// no DRM client's, with no drm-driver key (a driver without fdinfo stats, or
// no DRM file at all).
func ParseFdinfo(data []byte) (c snapshot.DRMClient, ok bool) {
	regions := map[string]*snapshot.DRMMemory{}
	engines := map[string]*snapshot.DRMEngine{}
	region := func(name string) *snapshot.DRMMemory {
		if regions[name] == nil {
			regions[name] = &snapshot.DRMMemory{Region: name}
		}
		return regions[name]
	}
	engine := func(name string) *snapshot.DRMEngine {
		if engines[name] == nil {
			engines[name] = &snapshot.DRMEngine{Name: name}
		}
		return engines[name]
	}
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		k, v, found := bytes.Cut(line, []byte{':'})
		if !found {
			continue
		}
		key, val := string(bytes.TrimSpace(k)), strings.TrimSpace(string(v))
		rest, drm := strings.CutPrefix(key, "drm-")
		if !drm {
			continue
		}
		switch {
		case rest == "driver":
			c.Driver, ok = val, true
		case rest == "client-id":
			c.ClientID, _ = strconv.ParseUint(val, 10, 64)
		case rest == "pdev":
			c.PCISlot = val
		case strings.HasPrefix(rest, "engine-capacity-"):
			engine(rest[len("engine-capacity-"):]).Capacity = number(val)
		case strings.HasPrefix(rest, "engine-"):
			engine(rest[len("engine-"):]).BusyNS = number(strings.TrimSuffix(val, " ns"))
		case strings.HasPrefix(rest, "total-cycles-"):
			engine(rest[len("total-cycles-"):]).TotalCycles = number(val)
		case strings.HasPrefix(rest, "cycles-"):
			engine(rest[len("cycles-"):]).Cycles = number(val)
		case strings.HasPrefix(rest, "total-"):
			region(rest[len("total-"):]).Total = size(val)
		case strings.HasPrefix(rest, "memory-"):
			region(rest[len("memory-"):]).Total = size(val)
		case strings.HasPrefix(rest, "resident-"):
			region(rest[len("resident-"):]).Resident = size(val)
		case strings.HasPrefix(rest, "shared-"):
			region(rest[len("shared-"):]).Shared = size(val)
		}
	}
	if !ok {
		return snapshot.DRMClient{}, false
	}
	for _, name := range sortedKeys(regions) {
		c.Memory = append(c.Memory, *regions[name])
	}
	for _, name := range sortedKeys(engines) {
		c.Engines = append(c.Engines, *engines[name])
	}
	markDeviceRegions(&c)
	return c, true
}

func number(s string) uint64 {
	n, _ := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	return n
}

// size reads a memory figure, a number with an optional unit, B, KiB or MiB
// (the kernel picks the largest that divides it).
func size(s string) uint64 {
	num, unit, _ := strings.Cut(s, " ")
	n := number(num)
	switch strings.TrimSpace(unit) {
	case "KiB":
		return n << 10
	case "MiB":
		return n << 20
	case "GiB":
		return n << 30
	}
	return n
}
