package accel

import "strings"

// intel is Intel. i915 (5.19 and later) and xe give DRM fdinfo. Device
// memory is i915's "local0".."localN" and xe's "vram0".."vramN" ("system",
// "stolen" and "gtt" are not the device's own). xe counts engine cycles
// (drm-cycles-, drm-total-cycles-) where i915 counts busy nanoseconds.
// Neither gives the device memory used in sysfs.
var intel = vendor{
	name:    "intel",
	pciID:   "0x8086",
	drivers: []string{"i915", "xe"},
	deviceRegion: func(r string) bool {
		return strings.HasPrefix(r, "local") || strings.HasPrefix(r, "vram")
	},
	memory:  noMemory,
	missing: "device memory used: not in sysfs (per process from fdinfo only)",
}
