// Package layout holds tests of the house's shape: which packages may link
// what, run through `go list` so they see what a build links, and how long
// a comment may run, read from the source with go/parser.
package layout

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDataPackagesLinkNoCapture: the packages that only read and write
// snapshots (the types, the rules, the store, the evidence, the renderers,
// the kubelet join, the tenant session, the metrics, the OCSF, NPD and NRI
// outputs and plugin) link neither go-nvml (cgo) nor nvmlread, nor the
// capture and its BPF (cilium/ebpf). A capture reaches them as a Snapshot,
// or the session through session.Host: cmd fills in both.
func TestDataPackagesLinkNoCapture(t *testing.T) {
	forbidden := []string{"github.com/NVIDIA/go-nvml/", "github.com/gpusnap/gpusnap/nvmlread",
		"github.com/cilium/ebpf", "github.com/gpusnap/gpusnap/capture", "github.com/gpusnap/gpusnap/bpf"}
	for _, pkg := range []string{"diff", "store", "bundle", "kubelet", "session", "snapshot", "eventlog", "metrics", "ocsf", "npd", "nri", "render"} {
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
