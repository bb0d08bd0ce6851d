package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/nvmlread"
	"github.com/gpusnap/gpusnap/snapshot"
)

// runCLI runs gpusnap in-process with a store in a temporary directory.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return gpusnap(t, append(args, "--db", filepath.Join(t.TempDir(), "gpusnap.db"))...)
}

func snapshotJSON(t *testing.T, args ...string) snapshot.Snapshot {
	t.Helper()
	code, stdout, stderr := runCLI(t, append([]string{"snapshot", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var s snapshot.Snapshot
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	return s
}

func nvmlFixture(name string) string { return filepath.Join("..", "..", "fixtures", "nvml", name) }

func TestSnapshotNVMLFixtureH100(t *testing.T) {
	s := snapshotJSON(t, "--nvml-fixture", nvmlFixture("h100x8.json"))
	n := s.NVML
	if n.Source != "fixture:"+nvmlFixture("h100x8.json") || len(n.Devices) != 8 || n.DriverVersion != "550.54.15" {
		t.Fatalf("nvml: source %q, %d devices, driver %q", n.Source, len(n.Devices), n.DriverVersion)
	}
	for i, g := range n.Devices {
		if g.Index != i || g.MinorNumber == nil || *g.MinorNumber != i || g.Memory == nil || g.Memory.Total != 85520809984 {
			t.Errorf("gpu %d: %+v", i, g)
		}
	}
	if p := n.Devices[0].ComputeProcesses; len(p) != 1 || p[0].PID != 4242 || *p[0].UsedGPUMemory != 60<<30 {
		t.Errorf("gpu 0 processes: %+v", p)
	}
	if n.Devices[5].Memory.Used != 12<<30 || n.Devices[5].ComputeProcesses != nil {
		t.Errorf("gpu 5 (memory held by nobody): %+v", n.Devices[5])
	}
}

func TestSnapshotNVMLFixtureA100MIG(t *testing.T) {
	s := snapshotJSON(t, "--nvml-fixture", nvmlFixture("a100-mig.json"))
	g := s.NVML.Devices[0]
	if *g.MIGMode != 1 || len(g.MIGDevices) != 3 || g.MIGDevices[1].ComputeProcesses[0].PID != 31400 {
		t.Fatalf("MIG GPU: %+v", g)
	}
	if s.NVML.Missing["devices[0].process_utilization"] != "not supported" {
		t.Errorf("missing: %v", s.NVML.Missing)
	}
}

func TestSnapshotNVMLFixtureMalformed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(path, []byte(`{"devices": [{"index": 0}, {"index": 1, "memory": {"used": "x"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "snapshot", "--nvml-fixture", path)
	want := "gpusnap: nvml fixture " + path + ": devices[1].memory.used: want a number\n"
	if code != 2 || stderr != want || stdout != "" {
		t.Errorf("exit %d, stderr %q, stdout %q; want 2 and %q", code, stderr, stdout, want)
	}
	code, _, stderr = runCLI(t, "snapshot", "--nvml-fixture", filepath.Join(t.TempDir(), "absent.json"))
	if code != 2 || !strings.Contains(stderr, "absent.json") {
		t.Errorf("absent fixture: exit %d, %q", code, stderr)
	}
}

// Fixtures that parse but could not come from one host (a null GPU, a shared
// minor number, a utilization above 100%) are refused the same way.
func TestSnapshotNVMLFixtureInconsistent(t *testing.T) {
	cases := map[string]string{
		`{"devices": [null]}`: "devices[0]: null, want a value",
		`{"devices": [{"minor_number": 0}, {"minor_number": -3}]}`:                                  "devices[1].minor_number: -3 is not a device minor number",
		`{"devices": [{"uuid": "GPU-a", "minor_number": 0}, {"uuid": "GPU-b", "minor_number": 0}]}`: "devices[1].minor_number: 0 is also devices[0]'s",
		`{"devices": [{"process_utilization": [{"pid": 9, "sm_util": 150, "mem_util": 1}]}]}`:       "devices[0].process_utilization[0].sm_util: 150, want a percentage (0 to 100)",
	}
	dir := t.TempDir()
	n := 0
	for text, problem := range cases {
		n++
		path := filepath.Join(dir, fmt.Sprintf("bad%d.json", n))
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runCLI(t, "snapshot", "--nvml-fixture", path)
		want := "gpusnap: nvml fixture " + path + ": " + problem + "\n"
		if code != 2 || stderr != want || stdout != "" {
			t.Errorf("%s: exit %d, stderr %q, stdout %q; want 2 and %q", text, code, stderr, stdout, want)
		}
	}
}

// On a host without libnvidia-ml (this project's machines), a snapshot says
// why NVML is missing and exits 0; --require-nvml makes it exit 2.
func TestSnapshotWithoutNVMLLibrary(t *testing.T) {
	if n, _ := (nvmlread.Options{}).ReadNVML(); n.Unavailable != "library not found" {
		t.Skipf("libnvidia-ml is loadable here (NVML unavailable: %q): this test is for hosts without it", n.Unavailable)
	}
	s := snapshotJSON(t)
	if s.NVML.Source != "library" || s.NVML.Unavailable != "library not found" {
		t.Errorf("nvml: %+v", s.NVML)
	}
	code, stdout, stderr := runCLI(t, "snapshot", "--require-nvml")
	if want := "gpusnap: NVML cannot be read: library not found (--require-nvml)\n"; code != 2 || stderr != want || stdout != "" {
		t.Errorf("--require-nvml: exit %d, stderr %q; want 2 and %q", code, stderr, want)
	}
	export := filepath.Join(t.TempDir(), "x.json")
	code, _, stderr = runCLI(t, "snapshot", "--export-nvml-fixture", export)
	if code != 2 || !strings.Contains(stderr, "library not found") {
		t.Errorf("export without NVML: exit %d, %q", code, stderr)
	}
	if _, err := os.Lstat(export); !os.IsNotExist(err) {
		t.Errorf("export without NVML left %s behind: %v", export, err)
	}
}

// --export-nvml-fixture writes a fixture that replays the same NVML, and
// never overwrites a file.
func TestSnapshotExportNVMLFixture(t *testing.T) {
	out := filepath.Join(t.TempDir(), "state.json")
	first := snapshotJSON(t, "--nvml-fixture", nvmlFixture("a100-mig.json"), "--export-nvml-fixture", out)
	second := snapshotJSON(t, "--nvml-fixture", out)
	first.NVML.Source, second.NVML.Source = "", ""
	if !reflect.DeepEqual(first.NVML, second.NVML) {
		t.Errorf("exported fixture replays differently:\n%+v\n%+v", first.NVML, second.NVML)
	}
	code, _, stderr := runCLI(t, "snapshot", "--nvml-fixture", nvmlFixture("a100-mig.json"), "--export-nvml-fixture", out)
	if code != 2 || !strings.Contains(stderr, "already exists") {
		t.Errorf("second export: exit %d, %q", code, stderr)
	}
}
