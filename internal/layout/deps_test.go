// Package layout holds tests of the house's shape: which packages may link
// what. They run `go list`, so they see what a build links, not what a
// file names.
package layout

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDataPackagesLinkNoCgoNVML: the packages that only read and write
// snapshots (the rules, the store, the evidence, the kubelet join, the OCSF,
// NPD and NRI renderers and plugin) link
// neither go-nvml (cgo) nor nvmlread; NVML reaches a capture through
// snapshot.NVMLReader, which cmd fills in.
func TestDataPackagesLinkNoCgoNVML(t *testing.T) {
	forbidden := []string{"github.com/NVIDIA/go-nvml/", "github.com/gpusnap/gpusnap/nvmlread"}
	for _, pkg := range []string{"diff", "store", "bundle", "kubelet", "snapshot", "eventlog", "ocsf", "npd", "nri"} {
		out, err := exec.Command("go", "list", "-deps", "github.com/gpusnap/gpusnap/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range forbidden {
				if strings.HasPrefix(dep, f) {
					t.Errorf("%s links %s", pkg, dep)
				}
			}
		}
	}
}
