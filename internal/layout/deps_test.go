// Package layout holds tests of the house's shape: which packages may link
// what, run through `go list` so they see what a build links, and how long
// a comment may run, read from the source with go/parser.
package layout

import (
	"go/ast"
	"go/token"
	"os/exec"
	"path/filepath"
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
		for _, dep := range deps(t, pkg) {
			for _, f := range forbidden {
				if strings.HasPrefix(dep, f) {
					t.Errorf("%s links %s", pkg, dep)
				}
			}
		}
	}
}

// TestReadersLinkNoGRPC: the packages that read, judge, store, bundle and
// print snapshots link no gRPC. They take the kubelet's answer as kubelet's data,
// never its client (kubelet/podresources), and a kernel log's position as
// snapshot data: snapshot imports no other package of gpusnap's (kmsg
// imports it), internal/ aside.
func TestReadersLinkNoGRPC(t *testing.T) {
	for _, pkg := range []string{"bundle", "render", "snapshot", "diff", "kubelet", "store", "store/tlog", "eventlog",
		"metrics", "ocsf", "npd", "kmsg", "reap"} {
		for _, dep := range deps(t, pkg) {
			if strings.HasPrefix(dep, "google.golang.org/grpc") || dep == "github.com/gpusnap/gpusnap/kubelet/podresources" {
				t.Errorf("%s links %s", pkg, dep)
			}
		}
	}
	out, err := exec.Command("go", "list", "-f", "{{join .Imports \" \"}}", "github.com/gpusnap/gpusnap/snapshot").CombinedOutput()
	if err != nil {
		t.Fatalf("go list snapshot: %v\n%s", err, out)
	}
	for _, imp := range strings.Fields(string(out)) {
		if strings.HasPrefix(imp, "github.com/gpusnap/gpusnap/") && !strings.HasPrefix(imp, "github.com/gpusnap/gpusnap/internal/") {
			t.Errorf("snapshot imports %s: it is the data the others share, and imports none of them", imp)
		}
	}
}

// TestArrowsLinkWhatTheyUse: a package links none of the packages below (a
// path ending in / stands for those under it),
// each of which it once linked for one type. render takes the kubelet's
// allocations as an interface, and bundle verifies the log's proofs with
// its format alone (store/tlog), not the store and bbolt.
func TestArrowsLinkWhatTheyUse(t *testing.T) {
	for pkg, forbidden := range map[string][]string{
		"render": {"github.com/gpusnap/gpusnap/kubelet", "github.com/gpusnap/gpusnap/kubelet/"},
		"bundle": {"github.com/gpusnap/gpusnap/store", "go.etcd.io/bbolt", "go.etcd.io/bbolt/"},
	} {
		for _, dep := range deps(t, pkg) {
			for _, f := range forbidden {
				if dep == f || strings.HasSuffix(f, "/") && strings.HasPrefix(dep, f) {
					t.Errorf("%s links %s", pkg, dep)
				}
			}
		}
	}
}

// bundleForCmd is what cmd may use of package bundle: the keys that keygen
// writes and the bundle verifier that verify prints. Writing a bundle and
// gathering its store proofs are the session's.
var bundleForCmd = map[string]bool{"ReadPrivateKey": true, "ReadPublicKey": true, "WriteKeyPair": true, "KeyID": true,
	"Verify": true, "VerifyDir": true, "Verification": true}

// TestCmdHoldsNoStoreOrBundleLogic: the store is package session's to open,
// walk, change and prove, and so is what follows a verdict (its record in
// the store's log, a checkpoint, a bundle and its proofs). cmd parses flags,
// calls a session.Host and prints. So no source file of cmd, whatever its
// build tags, imports the store, its log's format (store/...) or bbolt, and
// cmd uses of bundle only bundleForCmd.
func TestCmdHoldsNoStoreOrBundleLogic(t *testing.T) {
	root, err := filepath.Abs("../../cmd/gpusnap")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for name, f := range sourceFilesUnder(t, fset, root) {
		local := ""
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			if path == "github.com/gpusnap/gpusnap/store" || strings.HasPrefix(path, "github.com/gpusnap/gpusnap/store/") ||
				path == "go.etcd.io/bbolt" || strings.HasPrefix(path, "go.etcd.io/bbolt/") {
				t.Errorf("cmd/gpusnap/%s imports %s: the store is package session's to open, walk and prove", name, path)
			}
			if path == "github.com/gpusnap/gpusnap/bundle" {
				local = "bundle"
				if imp.Name != nil {
					local = imp.Name.Name
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || local == "" {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == local && !bundleForCmd[sel.Sel.Name] {
				t.Errorf("cmd/gpusnap/%s:%d uses bundle.%s: writing a bundle is package session's", name, fset.Position(sel.Pos()).Line, sel.Sel.Name)
			}
			return true
		})
	}
}

// deps lists what a package of the module links, as go list -deps prints it.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "github.com/gpusnap/gpusnap/"+pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}
