package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/diff"
)

// An unchanged process whose device path holds invalid UTF-8 raises nothing:
// the baseline read back from the store and the fresh capture must agree.
func TestDiffUnchangedHostileDevicePathIsClean(t *testing.T) {
	root := t.TempDir()
	pid := filepath.Join(root, "400")
	for _, f := range []struct{ name, data string }{
		{"stat", "400 (x\xff) S 1 400 400 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 900 0 0\n"},
		{"maps", "7f0000000000-7f0000200000 rw-s 00000000 00:06 77 /tmp/w/dev/nvidia\xff9\n"},
	} {
		if err := os.MkdirAll(filepath.Join(pid, "fd"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pid, f.name), []byte(f.data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/tmp/w/dev/nvidia\xff9", filepath.Join(pid, "fd", "5")); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "s.db")
	common := []string{"--db", db, "--proc-root", root, "--no-nvml"}
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", "t"}, common...)...); code != 0 {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	if code, stdout, stderr := gpusnap(t, append([]string{"diff", "--tenant", "t"}, common...)...); code != 0 {
		t.Fatalf("diff of an unchanged host: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestBaselineAllocation: job 4242 was given GPU 1 (SLURM_JOB_GPUS in the
// prolog's environment); its ghost at the end uses GPU 0.
func TestBaselineAllocation(t *testing.T) {
	db := filepath.Join(t.TempDir(), "s.db")
	t.Setenv("SLURM_JOB_ID", "4242")
	t.Setenv("SLURM_JOB_GPUS", "1")
	before := scenarioEnd("cuda-ghost-keeps-context", "before")
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", "4242", "--db", db}, before...)...); code != 0 {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	after := scenarioEnd("cuda-ghost-keeps-context", "after")
	code, stdout, stderr := gpusnap(t, append([]string{"diff", "--json", "--tenant", "4242", "--db", db}, after...)...)
	if code != exitFindings {
		t.Fatalf("diff: exit %d: %s", code, stderr)
	}
	var r diff.Result
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range r.Findings {
		if f.Kind == diff.KindOutOfAllocation {
			got = append(got, f.Device)
			if f.Process.PID != 670 || f.Severity != diff.High || !strings.Contains(strings.Join(f.Evidence, "\n"), "allocation of 4242: 1") {
				t.Errorf("finding: %+v", f)
			}
		}
	}
	if strings.Join(got, ",") != "/dev/nvidia0" {
		t.Errorf("out_of_allocation_gpu_use on %q, want /dev/nvidia0", got)
	}

	// --gpus wins over the environment, and bad input is one line and exit 2.
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", "4242", "--gpus", "0", "--db", db}, before...)...); code != 0 {
		t.Fatalf("baseline --gpus 0: exit %d: %s", code, stderr)
	}
	if code, stdout, _ := gpusnap(t, append([]string{"diff", "--json", "--tenant", "4242", "--db", db}, after...)...); strings.Contains(stdout, diff.KindOutOfAllocation) {
		t.Errorf("GPU 0 allocated, yet: exit %d %s", code, stdout)
	}
	t.Setenv("SLURM_JOB_GPUS", "zero")
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", "4242", "--db", db}, before...)...); code != exitError ||
		!strings.Contains(stderr, "SLURM_JOB_GPUS") {
		t.Errorf("bad SLURM_JOB_GPUS: exit %d: %s", code, stderr)
	}
}
