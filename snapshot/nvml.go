package snapshot

import (
	"fmt"
)

// Sources of an NVML view (NVML.Source).
const (
	NVMLSourceLibrary  = "library"
	NVMLSourceDisabled = "disabled"
	NVMLSourceFixture  = "fixture:" // followed by the fixture's path
)

// DeviceKey and MIGKey are the paths of a GPU and a MIG device in
// NVML.Missing and in an NVML fixture's errors.
func DeviceKey(i int) string             { return fmt.Sprintf("devices[%d]", i) }
func MIGKey(device string, j int) string { return fmt.Sprintf("%s.mig_devices[%d]", device, j) }
