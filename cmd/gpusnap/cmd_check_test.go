package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
)

// scenarioEnd is the --proc-root and --nvml-fixture flags of one end of a scenario.
func scenarioEnd(name, end string) []string {
	dir := filepath.Join("..", "..", "fixtures", "scenarios", name, end)
	return []string{"--proc-root", filepath.Join(dir, "proc"), "--nvml-fixture", filepath.Join(dir, "nvml.json")}
}

func TestCheckGhost(t *testing.T) {
	ghost := scenarioEnd("cuda-ghost-keeps-context", "after")
	code, stdout, stderr := gpusnap(t, append([]string{"check", "--json", "--gpus", "0"}, ghost...)...)
	if code != exitFindings {
		t.Fatalf("exit %d, want 1: %s", code, stderr)
	}
	var r diff.Result
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, f := range r.Findings {
		kinds[f.Kind] = true
		if f.Kind == diff.KindGPUInUse && f.Process.PID == 670 && f.Process.SlurmJobID != "4242" {
			t.Errorf("the ghost's finding does not name its job: %+v", f.Process)
		}
	}
	if !kinds[diff.KindGPUInUse] || !kinds[diff.KindZombieGPUMemory] || r.Check == nil || r.Check.GPUs != "0" {
		t.Errorf("check: %s", stdout)
	}
}

func TestCheckClean(t *testing.T) {
	// persistenced holds GPU 0 and is allowed; the 580 MiB NVML lists under
	// no process stays below the threshold given.
	clean := scenarioEnd("clean-persistenced-unchanged", "after")
	allow := filepath.Join(t.TempDir(), "allow")
	if err := os.WriteFile(allow, []byte("exe=/usr/bin/nvidia-persistenced\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := gpusnap(t, append([]string{"check", "--allow", allow, "--zombie-threshold", "1GiB"}, clean...)...)
	if code != exitClean || !strings.HasPrefix(stdout, "gpusnap check: 0 high") {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	// The same host without the allow list: persistenced is in use.
	if code, _, _ := gpusnap(t, append([]string{"check", "--zombie-threshold", "1GiB"}, clean...)...); code != exitFindings {
		t.Errorf("without --allow: exit %d, want 1", code)
	}
}

func TestCheckFailsClosed(t *testing.T) {
	clean := scenarioEnd("clean-persistenced-unchanged", "after")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--gpus", ""}, "gpusnap: usage: --gpus is empty"},
		{[]string{"--gpus", "0-x"}, `gpusnap: usage: --gpus: GPU list: "0-x" is not a GPU number`},
		{[]string{"--gpus", "3", "--zombie-threshold", "1GiB"}, "gpusnap: check: not known to be clean: GPU 3: NVML does not show it"},
		{[]string{"--gpus", "GPU-ffff", "--zombie-threshold", "1GiB"}, "gpusnap: check: not known to be clean: GPU-ffff: NVML does not show it"},
	} {
		code, _, stderr := gpusnap(t, append(append([]string{"check"}, tc.args...), clean...)...)
		if code != exitError || !strings.HasPrefix(stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q, want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}

// TestLiveCheckGhost: a real ghost (root: a loop device node named nvidia0,
// mapped rw-s by a setsid child whose parent exited) fails the check of GPU
// 0 and of every GPU, and not that of GPU 1; once killed, GPU 0 passes.
func TestLiveCheckGhost(t *testing.T) {
	livetest.Require(t, "losetup", "gcc")
	sc := livetest.StartGhost(t, livetest.NewLoop(t), livetest.Options{})
	inUse := func(args ...string) (int, bool) {
		code, stdout, stderr := gpusnap(t, append([]string{"check", "--json", "--no-nvml"}, args...)...)
		var r diff.Result
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("check %q: %v: %s", args, err, stderr)
		}
		for _, f := range r.Findings {
			if f.Kind == diff.KindGPUInUse && f.Process.PID == sc.Ghost.PID && f.Device == sc.Path && f.Severity == diff.High {
				return code, true
			}
		}
		return code, false
	}
	for _, gpus := range [][]string{{"--gpus", "0"}, nil} {
		if code, found := inUse(gpus...); code != exitFindings || !found {
			t.Errorf("check %q with the ghost alive: exit %d, ghost found %v", gpus, code, found)
		}
	}
	if _, found := inUse("--gpus", "1"); found {
		t.Error("the ghost of GPU 0 fails the check of GPU 1")
	}
	sc.Ghost.Kill(t)
	if _, found := inUse("--gpus", "0"); found {
		t.Error("the ghost is reported after it was killed")
	}
}
