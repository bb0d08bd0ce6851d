package procfs

import (
	"bytes"
	"strconv"
)

// DeviceMinor is the N of the `Device Minor: N` line of the driver's
// /proc/driver/nvidia/gpus/BUS/information, that of the GPU's /dev/nvidiaN.
func DeviceMinor(data []byte) (int, bool) {
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		if v, ok := bytes.CutPrefix(line, []byte("Device Minor:")); ok {
			n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
			return n, err == nil && n >= 0
		}
	}
	return 0, false
}
