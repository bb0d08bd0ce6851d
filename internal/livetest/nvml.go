package livetest

import (
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// nvmlHangSource is a libnvidia-ml whose nvmlInit_v2 never returns.
//
//go:embed helper/nvml_hang.c
var nvmlHangSource []byte

// HungNVML builds, with gcc, a libnvidia-ml.so.1 whose nvmlInit_v2 never
// returns, and returns its directory: a process started with it first on
// LD_LIBRARY_PATH loads it as go-nvml loads the real library (dlopen of
// libnvidia-ml.so.1). Needs gcc only, not root.
func HungNVML(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("live test: gcc is not installed (.ci/run installs it)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "nvml_hang.c")
	if err := os.WriteFile(src, nvmlHangSource, 0o600); err != nil {
		t.Fatalf("livetest: %v", err)
	}
	lib := filepath.Join(dir, "libnvidia-ml.so.1")
	if out, err := exec.Command("gcc", "-O", "-Wall", "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("livetest: gcc nvml_hang.c: %v\n%s", err, out)
	}
	return dir
}
