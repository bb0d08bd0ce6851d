package livetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// built is this tree's gpusnap, built once a test binary, since each build
// links the whole binary at a cost of seconds of CPU on a loaded host.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

// Gpusnap builds this tree's gpusnap on its first call and returns its
// path. A package that uses it calls RemoveGpusnap from its TestMain.
func Gpusnap(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "gpusnap-built-"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "gpusnap")
		cmd := exec.Command("go", "build", "-o", built.bin, "github.com/gpusnap/gpusnap/cmd/gpusnap")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// RemoveGpusnap removes what Gpusnap built, if anything.
func RemoveGpusnap() {
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
}
