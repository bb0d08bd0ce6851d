package capture

import (
	"os"
	"path/filepath"

	"github.com/gpusnap/gpusnap/snapshot"
)

// NVMLReader gives a capture NVML's view. Package nvmlread implements it
// over libnvidia-ml, go-nvml's mocks or a fixture. The capture takes an
// interface so that what needs only these types links no cgo.
type NVMLReader interface {
	ReadNVML() (snapshot.NVML, error)
}

// readNVML is r's view. A capture given no reader records NVML as not read,
// so the diff notes that GPU memory was not compared.
func readNVML(r NVMLReader) (snapshot.NVML, error) {
	if r == nil {
		return snapshot.NVML{Source: snapshot.NVMLSourceDisabled, Unavailable: "not read: the capture was given no NVML reader"}, nil
	}
	return r.ReadNVML()
}

// NVIDIADriverSign names what shows that the NVIDIA driver is loaded on the
// host whose /proc is procRoot, <procRoot>/driver/nvidia or, on the live
// /proc, a /dev/nvidia* node, and "" when neither does. A capture without NVML
// there has no GPU memory to compare, and the operator should hear it then.
func NVIDIADriverSign(procRoot string) string {
	if fi, err := os.Stat(filepath.Join(procRoot, "driver", "nvidia")); err == nil && fi.IsDir() {
		return filepath.Join(procRoot, "driver", "nvidia")
	}
	if isProcfs(procRoot) {
		if nodes, _ := filepath.Glob("/dev/nvidia*"); len(nodes) > 0 {
			return nodes[0]
		}
	}
	return ""
}
