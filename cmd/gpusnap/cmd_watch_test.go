package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/internal/testenv"
)

// TestWatchSystemdUnit: the unit in contrib/systemd runs watch with flags
// watch has, and systemd itself accepts the unit (where systemd-analyze is).
func TestWatchSystemdUnit(t *testing.T) {
	unit, err := os.ReadFile("../../contrib/systemd/gpusnap-watch.service")
	if err != nil {
		t.Fatal(err)
	}
	var execStart string
	for _, line := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			execStart = v
		}
	}
	args := strings.Fields(execStart)
	if len(args) < 2 || filepath.Base(args[0]) != "gpusnap" || args[1] != "watch" {
		t.Fatalf("ExecStart=%s", execStart)
	}
	var names []string
	for _, cmd := range newApp(io.Discard, io.Discard).Commands {
		if cmd.Name == "watch" {
			for _, f := range cmd.Flags {
				names = append(names, f.Names()...)
			}
		}
	}
	for _, a := range args[2:] {
		if name, ok := strings.CutPrefix(a, "--"); ok && !slices.Contains(names, name) {
			t.Errorf("the unit passes --%s, which watch does not take", name)
		}
	}
	verifyUnit(t, strings.Replace(string(unit), args[0], mustExecutable(t), 1))
}

func mustExecutable(t *testing.T) string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return self
}

// verifyUnit has systemd check the unit's syntax, in a subtest of its own:
// skipped under -short, and where systemd-analyze is not installed.
func verifyUnit(t *testing.T, unit string) {
	t.Run("systemd-analyze verify", func(t *testing.T) {
		testenv.Tools(t, "systemd-analyze")
		path := filepath.Join(t.TempDir(), "gpusnap-watch.service")
		if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
		// --man=no: its man page comes with the package, not with this test.
		out, err := exec.Command("systemd-analyze", "verify", "--man=no", path).CombinedOutput()
		if err != nil {
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}
	})
}
