package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/nvmlread"
	"github.com/gpusnap/gpusnap/snapshot"
)

// section returns the lines of ps's section of GPU idx.
func section(out string, idx string) string {
	_, rest, ok := strings.Cut(out, "\nGPU "+idx+"  ")
	if !ok {
		return ""
	}
	sec, _, _ := strings.Cut(rest, "\n\n")
	return sec
}

func TestPsGPUSection(t *testing.T) {
	code, out, stderr := runCLI(t, "ps", "--proc-root", psFixture, "--nvml-fixture", nvmlFixture("h100x8.json"))
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for idx, want := range map[string][]string{
		"0": {"/dev/nvidia0", "memory: 60.0GiB used of 79.6GiB, 0B unaccounted", "4242  C     60.0GiB     97   40    -    1000  python3  /usr/bin/python3.11"},
		"1": {"60.0GiB unaccounted", "4243  C     60.0GiB", "(no live process: orphan)", `not listed by NVML: 5000 1001(euid 0) python3\n\x1b[31mFAKE holders 3:/dev/nvidia1(r) 5:/dev/nvidia1 (deleted)(rw) mappings /dev/nvidia1 rw-s 2.0MiB`},
		"3": {"62.0GiB used", "5150  C     2.0GiB      3    1", "not listed by NVML: 6000 1000 srun_task holders - mappings /srv/ctr 2/rootfs/dev/nvidia3 (deleted) rw-p 2.0MiB"},
		// No live process has 4246 or 6001: all 61 GiB used are unaccounted,
		// 6001's unknown figure included.
		"4": {"61.0GiB used of 79.6GiB, 61.0GiB unaccounted", "6001  C     n/a"},
		"5": {"memory: 12.0GiB used of 79.6GiB, 12.0GiB unaccounted"},
	} {
		sec := section(out, idx)
		for _, w := range want {
			if !strings.Contains(sec, w) {
				t.Errorf("GPU %s section lacks %q:\n%s", idx, w, sec)
			}
		}
	}
	if strings.Contains(section(out, "5"), "PID") || strings.Contains(section(out, "0"), "not listed") {
		t.Errorf("GPU 5 lists processes or GPU 0 has unlisted ones:\n%s", out)
	}
	if !terminalSafe(out) {
		t.Errorf("raw control bytes:\n%q", out)
	}
}

func TestPsGPUSectionMIG(t *testing.T) {
	code, out, stderr := runCLI(t, "ps", "--proc-root", psFixture, "--nvml-fixture", nvmlFixture("a100-mig.json"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	sec := section(out, "0")
	for _, w := range []string{
		// 31337 and 31400 are orphans here (the ps fixture has neither): their
		// memory is unaccounted, as check and the metrics count it.
		"memory: 26.0GiB used of 40.0GiB, 26.0GiB unaccounted",
		"MIG 1/0 MIG-c2d3e4f5-9012-4b3c-a4d5-3041526374a5: 15.0GiB used of 19.5GiB, 15.0GiB unaccounted",
		"MIG 13/0 MIG-e4f5a6b7-1234-4d5e-86f7-526374a5b6c7: 3.0GiB used of 4.9GiB, 3.0GiB unaccounted",
		"31400  C     8.0GiB      -    -     5/0",
	} {
		if !strings.Contains(sec, w) {
			t.Errorf("GPU 0 section lacks %q:\n%s", w, sec)
		}
	}
}

func TestPsGPUJSON(t *testing.T) {
	code, out, stderr := runCLI(t, "ps", "--json", "--proc-root", psFixture, "--nvml-fixture", nvmlFixture("h100x8.json"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep struct {
		Processes []snapshot.Process `json:"processes"`
		GPUs      []snapshot.GPUUse  `json:"gpus"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.GPUs) != 8 || rep.GPUs[0].Processes[0].Join != snapshot.JoinPID || rep.GPUs[1].Unlisted[0].PID != 5000 {
		t.Fatalf("gpus: %+v", rep.GPUs)
	}
	if u := rep.GPUs[5].Unaccounted; u == nil || *u != 12<<30 {
		t.Errorf("GPU 5 unaccounted: %v", u)
	}
}

// A process NVML lists is in ps's table even when it maps and holds no
// device gpusnap can see (a container's /dev, say).
func TestPsListsNVMLProcesses(t *testing.T) {
	fixture := filepath.Join(t.TempDir(), "nvml.json")
	if err := os.WriteFile(fixture, []byte(`{"devices": [{"index": 0, "uuid": "GPU-0", "minor_number": 0,
		"compute_processes": [{"pid": 7100, "used_gpu_memory": 1024}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI(t, "ps", "--proc-root", psFixture, "--nvml-fixture", fixture)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	table, _, _ := strings.Cut(out, "\n\n")
	if !strings.Contains(table, "\n7100 ") || !strings.Contains(section(out, "0"), "7100  C     1.0KiB") {
		t.Errorf("7100 missing from the table or GPU 0:\n%s", out)
	}
}

// Without libnvidia-ml, ps still prints its table and says on stderr why
// there is no per-GPU section; --no-nvml says nothing (TestPsTable).
func TestPsWithoutNVMLLibrary(t *testing.T) {
	if n, _ := (nvmlread.Options{}).ReadNVML(); n.Unavailable != "library not found" {
		t.Skipf("libnvidia-ml is loadable here (NVML unavailable: %q): this test is for hosts without it", n.Unavailable)
	}
	code, out, stderr := runCLI(t, "ps", "--proc-root", psFixture)
	if code != 0 || strings.Contains(out, "\nGPU ") || stderr != "gpusnap: NVML unavailable (library not found): no per-GPU section\n" {
		t.Errorf("exit %d, stderr %q:\n%s", code, stderr, out)
	}
}

// A zombie NVML lists is shown as ps(1) shows one, `<defunct>` after its
// name, in the table and in its GPU's section; --json joins it as "defunct".
func TestPsShowsDefunct(t *testing.T) {
	after := filepath.Join(scenarioDir("orphan-pid-defunct"), "after")
	args := []string{"ps", "--proc-root", filepath.Join(after, "proc"), "--nvml-fixture", filepath.Join(after, "nvml.json")}
	code, out, stderr := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	table, _, _ := strings.Cut(out, "\n\n")
	if !strings.Contains(table, "\n7777 7770 Nov29   Z 1000 zombie_context  0   3.0GiB  -   -    session-3.scope  python3 <defunct>") ||
		!strings.Contains(section(out, "0"), "7777  C     3.0GiB      -    -     -    1000  python3 <defunct>  -") {
		t.Errorf("zombie 7777 not shown as <defunct>:\n%s", out)
	}
	if strings.Contains(table, "\n7770 ") {
		t.Errorf("its launcher, which uses no GPU, is listed:\n%s", out)
	}
	code, out, stderr = runCLI(t, append(args, "--json")...)
	var rep struct {
		GPUs []snapshot.GPUUse `json:"gpus"`
	}
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("exit %d, %v: %s", code, err, stderr)
	}
	if p := rep.GPUs[0].Processes[0]; p.PID != 7777 || p.Join != snapshot.JoinDefunct {
		t.Errorf("7777 joined as %+v", p)
	}
}
