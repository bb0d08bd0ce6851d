package procfs

import (
	"bytes"
	"strconv"

	"github.com/gpusnap/gpusnap/snapshot"
)

// /proc/devices lists the registered majors.
//
//	Character devices:
//	  1 mem
//	195 nvidia-frontend
//	508 nvidia-uvm
//
//	Block devices:
//	  7 loop
//
// The NVIDIA driver registers 195 for /dev/nvidia0..N, nvidiactl and
// nvidia-modeset, and dynamic majors for nvidia-uvm, nvidia-caps,
// nvidia-nvswitch (and newer nvidia-caps-imex-channels). Only this file says
// which majors those got on this host. DeviceClasses (device_class.go) uses them.

// ParseDevices reads the text of /proc/devices and returns the character
// majors whose driver name starts with "nvidia", and whether there is one.
func ParseDevices(data []byte) snapshot.DeviceClasses {
	dc := snapshot.DeviceClasses{NVIDIAMajors: map[uint32]string{}}
	char := false
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		switch {
		case bytes.HasPrefix(line, []byte("Character devices:")):
			char = true
			continue
		case bytes.HasPrefix(line, []byte("Block devices:")):
			char = false
			continue
		}
		fields := bytes.Fields(line)
		if !char || len(fields) != 2 || !bytes.HasPrefix(fields[1], []byte("nvidia")) {
			continue
		}
		major, err := strconv.ParseUint(string(fields[0]), 10, 32)
		if err != nil {
			continue
		}
		dc.Registered = true
		if major == snapshot.NVIDIAMajor {
			continue
		}
		dc.NVIDIAMajors[uint32(major)] = string(fields[1])
	}
	return dc
}
