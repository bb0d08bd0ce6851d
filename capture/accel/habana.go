package accel

// habana is Habana (Intel Gaudi). The habanalabs driver's accel nodes
// (/dev/accel/accelN) give no memory or engine time in fdinfo, so gpusnap
// sees who holds and maps them, not what they use.
var habana = vendor{
	name:         "habana",
	pciID:        "0x1da3",
	drivers:      []string{"habanalabs"},
	deviceRegion: noDeviceRegion,
	memory:       noMemory,
	missing:      "per-process memory and engine time: the habanalabs driver gives none in fdinfo (holders and mappings only)",
}
