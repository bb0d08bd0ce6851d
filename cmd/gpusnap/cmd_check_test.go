package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
)

// scenarioEnd is the --proc-root and --nvml-fixture flags of one end of a scenario.
func scenarioEnd(name, end string) []string {
	dir := filepath.Join(scenarioDir(name), end)
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
	// persistenced holds GPU 0 and is allowed; of the 580 MiB NVML lists
	// under no process, 540 are the driver's reserve, the rest below the threshold.
	clean := scenarioEnd("clean-persistenced-unchanged", "after")
	allow := filepath.Join(t.TempDir(), "allow")
	if err := os.WriteFile(allow, []byte("exe=/usr/bin/nvidia-persistenced\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := gpusnap(t, append([]string{"check", "--allow", allow}, clean...)...)
	if code != exitClean || !strings.HasPrefix(stdout, "gpusnap check: clean: 0 high") {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	// The same host without the allow list: persistenced is in use.
	if code, _, _ := gpusnap(t, append([]string{"check", "--allow", ""}, clean...)...); code != exitFindings {
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

// Memory no process accounts for on GPU 0 (NVML lists no process) while a
// live ghost holds and maps its node: check's zombie verdict names the
// ghost to kill first, then check again, and a reset only if memory is still
// held with nothing on the node. Once the ghost is gone, next names it no
// more. (Other tests' holders of nvidia0 nodes may stand beside it.)
func TestLiveCheckZombieWithLiveHolders(t *testing.T) {
	livetest.Require(t, "losetup", "gcc")
	sc := livetest.StartGhost(t, livetest.NewLoop(t), livetest.Options{})
	nvml := filepath.Join(scenarioDir("zombie-memory"), "after", "nvml.json")
	zombie := func() (int, *diff.Triage) {
		t.Helper()
		code, stdout, stderr := gpusnap(t, "check", "--json", "--gpus", "0", "--nvml-fixture", nvml)
		var r diff.Result
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("check: %v: %s", err, stderr)
		}
		for _, f := range r.Findings {
			if f.Kind == diff.KindZombieGPUMemory {
				return code, f.Triage
			}
		}
		t.Fatalf("check: no zombie_gpu_memory: %s", stdout)
		return code, nil
	}
	ghost := strconv.Itoa(sc.Ghost.PID)
	code, tr := zombie()
	names := func(tr *diff.Triage) bool {
		return tr != nil && slices.Contains(strings.FieldsFunc(tr.Next, func(r rune) bool { return r == ' ' || r == ',' || r == '(' || r == ')' }), ghost)
	}
	switch {
	case code != exitFindings:
		t.Errorf("check: exit %d, want %d", code, exitFindings)
	case tr == nil || tr.Class != diff.ClassZombieContext || tr.Rule != "zombie-live-holders" || !names(tr):
		t.Errorf("zombie memory with the ghost %s holding GPU 0: %+v, want zombie-live-holders naming it", ghost, tr)
	case !strings.Contains(tr.Next, "gpusnap check --gpus 0 again") || strings.Index(tr.Next, "kill -9") > strings.Index(tr.Next, "reset the GPU"):
		t.Errorf("next %q: want the kill, the check again, then a reset", tr.Next)
	}
	sc.Ghost.Kill(t)
	if _, tr = zombie(); tr == nil || tr.Class != diff.ClassZombieContext || names(tr) {
		t.Errorf("zombie memory after the ghost %s was killed: %+v, want zombie_context naming it no more", ghost, tr)
	}
}

// shippedAllow is the allow list the package installs as --allow's default.
var shippedAllow = filepath.Join("..", "..", "contrib", "allow", "allow.list")

// fromOrTo finds the words of a diff's two ends, which a check has not.
var fromOrTo = regexp.MustCompile(`\b(FROM|TO)\b`)

// TestCheckCleanScenarios: the after-state of every scenario that leaves the
// GPU clean, and the real H200's idle NVML export, pass check with the
// shipped allow list: the driver's reserve and NVIDIA's daemons are no
// finding.
func TestCheckCleanScenarios(t *testing.T) {
	cases := map[string][]string{
		"h200-idle": {"--proc-root", filepath.Join(scenarioDir("clean-persistenced-unchanged"), "after", "proc"),
			"--nvml-fixture", filepath.Join("..", "..", "fixtures", "nvml", "h200-idle.json")},
	}
	for _, name := range []string{"clean-persistenced-unchanged", "allowed-workload", "other-device-unchanged",
		"other-device-mapping", "memory-of-a-live-process", "pid-reuse-without-device", "survivor-drops-mapping"} {
		cases[name] = scenarioEnd(name, "after")
	}
	for name, end := range cases {
		code, stdout, stderr := gpusnap(t, append([]string{"check", "--gpus", "0", "--allow", shippedAllow}, end...)...)
		if code != exitClean || !strings.HasPrefix(stdout, "gpusnap check: clean: ") {
			t.Errorf("%s: exit %d, want 0 and clean:\n%s%s", name, code, stdout, stderr)
		}
		if fromOrTo.MatchString(stdout + stderr) {
			t.Errorf("%s: check speaks of FROM or TO:\n%s%s", name, stdout, stderr)
		}
	}
}

// TestCheckNotClean: what a tenant leaves is still caught past the driver's
// reserve, said as "not clean", in words of now.
func TestCheckNotClean(t *testing.T) {
	for name, kind := range map[string]string{
		"zombie-memory":            diff.KindZombieGPUMemory,
		"cuda-ghost-keeps-context": diff.KindZombieGPUMemory,
		"leftover-read-only":       diff.KindGPUInUse,
	} {
		code, stdout, stderr := gpusnap(t, append([]string{"check", "--gpus", "0", "--allow", shippedAllow}, scenarioEnd(name, "after")...)...)
		if code != exitFindings || !strings.HasPrefix(stdout, "gpusnap check: not clean: ") || !strings.Contains(stdout, "  "+kind+": ") {
			t.Errorf("%s: exit %d, want 1, not clean and %s:\n%s%s", name, code, kind, stdout, stderr)
		}
		if m := fromOrTo.FindString(stdout + stderr); m != "" {
			t.Errorf("%s: check speaks of %s:\n%s%s", name, m, stdout, stderr)
		}
	}
}

// TestCheckUnseenGPU: a GPU that no device node shows and no NVML lists was
// not looked at: exit 2 with one line naming it, never clean.
func TestCheckUnseenGPU(t *testing.T) {
	clean := scenarioEnd("clean-persistenced-unchanged", "after")
	code, stdout, stderr := gpusnap(t, append([]string{"check", "--no-nvml", "--gpus", "7", "--allow", shippedAllow}, clean[:2]...)...)
	want := "gpusnap: check: not known to be clean: GPU 7: no device node of it was seen and NVML was not read (disabled by --no-nvml)\n"
	if code != exitError || stderr != want || !strings.HasPrefix(stdout, "gpusnap check: not known to be clean: ") {
		t.Errorf("exit %d, stderr %q, want 2 and %q:\n%s", code, stderr, want, stdout)
	}
	// GPU 0's node is held there: it is seen, and clean without NVML.
	if code, stdout, stderr := gpusnap(t, append([]string{"check", "--no-nvml", "--gpus", "0", "--allow", shippedAllow}, clean[:2]...)...); code != exitClean {
		t.Errorf("GPU 0 without NVML: exit %d, want 0:\n%s%s", code, stdout, stderr)
	}
}

// TestCheckAllNoGPUSeen: a check of every GPU, with no NVML and no GPU
// seen, is clean only where /proc/devices shows the NVIDIA driver not
// loaded; with it loaded, or the file unread, it is not known to be clean.
func TestCheckAllNoGPUSeen(t *testing.T) {
	root := filepath.Join(t.TempDir(), "proc")
	if out, err := exec.Command("cp", "-a", filepath.Join(scenarioDir("clean-persistenced-unchanged"), "after", "proc"), root).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	// persistenced is the one process that holds a GPU.
	if err := os.RemoveAll(filepath.Join(root, "812")); err != nil {
		t.Fatal(err)
	}
	devices := filepath.Join(root, "devices")
	for _, tc := range []struct {
		devices string // "": no devices file
		code    int
		first   string
	}{
		{"Character devices:\n  1 mem\n226 drm\n\nBlock devices:\n  7 loop\n", exitClean, "gpusnap check: clean: "},
		{"Character devices:\n  1 mem\n195 nvidia-frontend\n\nBlock devices:\n  7 loop\n", exitError, "gpusnap check: not known to be clean: "},
		{"", exitError, "gpusnap check: not known to be clean: "},
	} {
		if err := os.Remove(devices); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if tc.devices != "" {
			if err := os.WriteFile(devices, []byte(tc.devices), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		code, stdout, stderr := gpusnap(t, "check", "--no-nvml", "--allow", shippedAllow, "--proc-root", root)
		if code != tc.code || !strings.HasPrefix(stdout, tc.first) {
			t.Errorf("devices %q: exit %d, want %d and %q:\n%s%s", tc.devices, code, tc.code, tc.first, stdout, stderr)
		}
		if code == exitError && !strings.HasPrefix(stderr, "gpusnap: check: not known to be clean: every GPU: none was seen") {
			t.Errorf("devices %q: stderr %q", tc.devices, stderr)
		}
		if code == exitClean && !strings.Contains(stdout, "\nnote: no GPU on this host: ") {
			t.Errorf("a check of a host with no GPU does not say so:\n%s", stdout)
		}
	}
}
