package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/snapshot"
)

// An AMD host read from the kernel (--sys-root): ps lists the ROCm worker
// beside the NVIDIA users, by its kfd and render node, and not the browser
// idle on the render node; check fails on the worker and on the VRAM no
// live process accounts for, and shows the browser low.
func TestAcceleratorsPsAndCheck(t *testing.T) {
	roots := []string{"--proc-root", "../../fixtures/proc/amdhost", "--sys-root", "../../fixtures/sys/amdhost", "--no-nvml"}
	code, stdout, stderr := gpusnap(t, append([]string{"ps", "--json"}, roots...)...)
	if code != 0 {
		t.Fatalf("ps: exit %d: %s", code, stderr)
	}
	var rep struct{ Processes []snapshot.Process }
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range rep.Processes {
		pids = append(pids, p.PID)
	}
	if !slices.Equal(pids, []int{4242, 5000, 5150, 6000}) {
		t.Errorf("ps lists %v", pids)
	}
	if code, stdout, _ = gpusnap(t, append([]string{"ps", "-p", "5150"}, roots...)...); code != 0 || !strings.Contains(stdout, "kfd,re") {
		t.Errorf("ps -p 5150: exit %d\n%s", code, stdout)
	}

	db := t.TempDir() + "/gpusnap.db"
	code, stdout, stderr = gpusnap(t, append([]string{"check", "--json", "--db", db}, roots...)...)
	var r diff.Result
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || code != 1 {
		t.Fatalf("check: exit %d, %v: %s %s", code, err, stdout, stderr)
	}
	var got []string
	for _, f := range r.Findings {
		if f.Process == nil || f.Process.PID == 5150 || f.Process.PID == 6300 {
			got = append(got, f.Kind+" "+f.Severity.String()+" "+f.Device)
		}
	}
	want := []string{"gpu_in_use high /dev/dri/renderD128", "gpu_in_use high /dev/kfd",
		"zombie_gpu_memory high 0000:03:00.0", "gpu_in_use low /dev/dri/renderD128"}
	if !slices.Equal(got, want) {
		t.Errorf("check findings:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
