package nvmlread

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

func readFixture(t *testing.T, path string) snapshot.NVML {
	t.Helper()
	n, err := (Options{FixturePath: path}).ReadNVML()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestNVMLFixtureH100(t *testing.T) {
	path := filepath.Join("..", "fixtures", "nvml", "h100x8.json")
	n := readFixture(t, path)
	if n.Source != "fixture:"+path || n.Unavailable != "" {
		t.Fatalf("source %q unavailable %q", n.Source, n.Unavailable)
	}
	if n.DriverVersion != "550.54.15" || n.NVMLVersion != "12.550.54.15" || n.CUDADriverVersion != 12040 {
		t.Errorf("versions: %q %q %d", n.DriverVersion, n.NVMLVersion, n.CUDADriverVersion)
	}
	if len(n.Devices) != 8 {
		t.Fatalf("%d devices, want 8", len(n.Devices))
	}
	g3 := n.Devices[3]
	if g3.UUID != "GPU-6c7d8e9f-3a4b-4c5d-8e6f-7a8b9c0d1e2f" || *g3.MinorNumber != 3 || g3.PCIBusID != "00000000:5D:00.0" {
		t.Errorf("gpu 3: %+v", g3)
	}
	if g3.Memory == nil || g3.Memory.Reserved == nil || *g3.Memory.Reserved != 566231040 || g3.Memory.Used != 62<<30 {
		t.Errorf("gpu 3 memory: %+v", g3.Memory)
	}
	if len(g3.ComputeProcesses) != 2 || g3.ComputeProcesses[1].PID != 5150 || *g3.ComputeProcesses[1].UsedGPUMemory != 2<<30 {
		t.Errorf("gpu 3 processes: %+v", g3.ComputeProcesses)
	}
	if g3.ComputeProcesses[0].GPUInstanceID != nil {
		t.Errorf("MIG off: instance id %d, want none", *g3.ComputeProcesses[0].GPUInstanceID)
	}
	if len(g3.ProcessUtilization) != 2 || g3.ProcessUtilization[0].SMUtil != 94 {
		t.Errorf("gpu 3 utilization: %+v", g3.ProcessUtilization)
	}
	if g3.MIGMode == nil || *g3.MIGMode != 0 {
		t.Errorf("gpu 3 MIG mode: %v", g3.MIGMode)
	}
	if p := n.Devices[4].ComputeProcesses[1]; p.PID != 6001 || p.UsedGPUMemory != nil {
		t.Errorf("gpu 4 process 6001: %+v", p)
	}
	want := map[string]string{"devices[4].compute_processes[1].used_gpu_memory": "not available"}
	checkMissing(t, n.Missing, want)
}

func TestNVMLFixtureA100MIG(t *testing.T) {
	n := readFixture(t, filepath.Join("..", "fixtures", "nvml", "a100-mig.json"))
	g := n.Devices[0]
	if g.MIGMode == nil || *g.MIGMode != 1 || len(g.MIGDevices) != 3 {
		t.Fatalf("MIG: mode %v, %d devices", g.MIGMode, len(g.MIGDevices))
	}
	if p := g.ComputeProcesses[1]; p.PID != 31400 || *p.GPUInstanceID != 5 || *p.ComputeInstanceID != 0 {
		t.Errorf("parent list: %+v", p)
	}
	m := g.MIGDevices[0]
	if m.GPUInstanceID != 1 || m.UUID != "MIG-c2d3e4f5-9012-4b3c-a4d5-3041526374a5" || len(m.ComputeProcesses) != 1 || m.ComputeProcesses[0].PID != 31337 {
		t.Errorf("MIG device 0: %+v", m)
	}
	if m := g.MIGDevices[2]; m.GPUInstanceID != 13 || m.Memory.Used != 3<<30 || len(m.ComputeProcesses) != 0 {
		t.Errorf("MIG device 2: %+v", m)
	}
	want := map[string]string{"devices[0].process_utilization": "not supported"}
	checkMissing(t, n.Missing, want)
	if n.Devices[1].MIGDevices != nil {
		t.Errorf("MIG off GPU has MIG devices")
	}
}

// A fixture read, exported and read again gives the same NVML.
func TestNVMLFixtureRoundTrip(t *testing.T) {
	for _, name := range []string{"h100x8.json", "a100-mig.json", "h200-ghost.json", "h200-idle.json", "failures"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join("..", "fixtures", "nvml", name)
			if name == "failures" {
				path = writeFile(t, dir, "in.json", failuresFixture)
			}
			first := readFixture(t, path)
			out := filepath.Join(dir, "out.json")
			if err := ExportFixture(t.Context(), out, first); err != nil {
				t.Fatal(err)
			}
			second := readFixture(t, out)
			first.Source, second.Source = "", ""
			if !reflect.DeepEqual(first, second) {
				a, _ := os.ReadFile(out)
				t.Errorf("round trip differs:\nfirst  %+v\nsecond %+v\nexported %s", first, second, a)
			}
		})
	}
}

// failuresFixture has a value of each kind failing, and a GPU lost mid-read.
const failuresFixture = `{
  "driver_version": "535.104.05",
  "devices": [
    {"index": 0, "uuid": "GPU-0", "memory": {"total": 100, "used": 10, "free": 90}, "mig_mode": 1,
     "compute_processes": [{"pid": 10, "used_gpu_memory": 5, "gpu_instance_id": 1}],
     "mig_devices": [{"gpu_instance_id": 1, "compute_instance_id": 0, "uuid": "MIG-0",
                      "memory": {"total": 50, "used": 5, "free": 45}, "compute_processes": [{"pid": 10}]}]},
    {"index": 1, "uuid": "GPU-1", "name": "lost", "minor_number": 1},
    {"index": 2},
    {"index": 3, "uuid": "GPU-3", "mig_mode": 1}
  ],
  "errors": {
    "nvml_version": "ERROR_NO_PERMISSION",
    "devices[0].graphics_processes": "ERROR_NO_PERMISSION",
    "devices[1].pci_bus_id": "ERROR_GPU_IS_LOST",
    "devices[2]": "ERROR_NO_PERMISSION",
    "devices[3].mig_devices": "ERROR_UNKNOWN"
  }
}`

// checkMissing reports each path whose reason differs from want.
func checkMissing(t *testing.T, got, want map[string]string) {
	t.Helper()
	for k, v := range got {
		if want[k] != v {
			t.Errorf("missing[%s] = %q, want %q", k, v, want[k])
		}
	}
	for k, v := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("missing[%s] absent, want %q", k, v)
		}
	}
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestNVMLFixtureFailures(t *testing.T) {
	n := readFixture(t, writeFile(t, t.TempDir(), "f.json", failuresFixture))
	want := map[string]string{
		"nvml_version":                                                       "no permission",
		"cuda_driver_version":                                                "not supported",
		"devices[0].name":                                                    "not supported",
		"devices[0].minor_number":                                            "not supported",
		"devices[0].pci_bus_id":                                              "not supported",
		"devices[0].memory.reserved":                                         "not supported",
		"devices[0].graphics_processes":                                      "no permission",
		"devices[0].compute_processes[0].compute_instance_id":                "not available",
		"devices[0].mig_devices[0].memory.reserved":                          "not supported",
		"devices[0].mig_devices[0].compute_processes[0].used_gpu_memory":     "not available",
		"devices[0].mig_devices[0].compute_processes[0].gpu_instance_id":     "not available",
		"devices[0].mig_devices[0].compute_processes[0].compute_instance_id": "not available",
		"devices[1].pci_bus_id":                                              "gpu is lost",
		"devices[2]":                                                         "no permission",
		"devices[3].name":                                                    "not supported",
		"devices[3].minor_number":                                            "not supported",
		"devices[3].pci_bus_id":                                              "not supported",
		"devices[3].memory":                                                  "not supported",
		"devices[3].mig_devices":                                             "unknown error",
		"devices[0].accounting_mode":                                         "not supported",
		"devices[3].accounting_mode":                                         "not supported",
	}
	checkMissing(t, n.Missing, want)
	// The lost GPU keeps what was read before it was lost, and nothing after.
	if g := n.Devices[1]; g.Name != "lost" || g.MinorNumber == nil || g.Memory != nil || g.MIGMode != nil {
		t.Errorf("lost GPU: %+v", g)
	}
	if g := n.Devices[2]; g.UUID != "" || g.Index != 2 {
		t.Errorf("GPU without a handle: %+v", g)
	}
}

func TestNVMLFixtureMalformed(t *testing.T) {
	cases := []struct{ name, text, want string }{
		{"not json", `{"devices": [`, "not a complete JSON object"},
		{"syntax", "{\n\"devices\": [}", "line 2: invalid character '}'"},
		{"trailing", `{"devices": []} {}`, "data after the JSON object"},
		{"top array", `[]`, "top level: want an object"},
		{"top null", `null`, "top level: want an object"},
		{"memory string", `{"devices": [{"index": 0}, {"index": 1, "memory": {"used": "lots"}}]}`, "devices[1].memory.used: want a number"},
		{"negative", `{"devices": [{"memory": {"total": -1}}]}`, "devices[0].memory.total: want a whole number that fits uint64, got -1"},
		{"fraction", `{"devices": [{"minor_number": 1.5}]}`, "devices[0].minor_number: want a whole number"},
		{"unknown field", `{"devices": [{"index": 0, "memroy": {}}]}`, "devices[0].memroy: unknown field"},
		{"unknown top", `{"driver": "x", "devices": []}`, "driver: unknown field"},
		{"process pid", `{"devices": [{"compute_processes": [{"pid": 1}, {"pid": "x"}]}]}`, "devices[0].compute_processes[1].pid: want a number"},
		{"bad pid", `{"devices": [{"compute_processes": [{"pid": 0}]}]}`, "devices[0].compute_processes[0].pid: 0 is not a PID"},
		{"negative pid", `{"devices": [{"process_utilization": [{"pid": -4, "sm_util": 1, "mem_util": 1}]}]}`, "devices[0].process_utilization[0].pid: -4 is not a PID"},
		{"mig pid", `{"devices": [{"mig_mode": 1, "mig_devices": [{"graphics_processes": [{"pid": -1}]}]}]}`, "devices[0].mig_devices[0].graphics_processes[0].pid: -1 is not a PID"},
		{"null device", `{"devices": [null]}`, "devices[0]: null, want a value"},
		{"null process", `{"devices": [{"compute_processes": [{"pid": 1}, null]}]}`, "devices[0].compute_processes[1]: null, want a value"},
		{"negative minor", `{"devices": [{"minor_number": 0}, {"minor_number": -3}]}`, "devices[1].minor_number: -3 is not a device minor number"},
		{"shared minor", `{"devices": [{"minor_number": 2}, {"minor_number": 5}, {"minor_number": 2}]}`, "devices[2].minor_number: 2 is also devices[0]'s"},
		{"shared uuid", `{"devices": [{"uuid": "GPU-a"}, {"uuid": "GPU-a"}]}`, `devices[1].uuid: "GPU-a" is also devices[0]'s`},
		{"sm util", `{"devices": [{"process_utilization": [{"pid": 7, "sm_util": 101, "mem_util": 3}]}]}`, "devices[0].process_utilization[0].sm_util: 101, want a percentage (0 to 100)"},
		{"mem util", `{"devices": [{}, {"process_utilization": [{"pid": 7, "sm_util": 100, "mem_util": 4000}]}]}`, "devices[1].process_utilization[0].mem_util: 4000, want a percentage"},
		{"index order", `{"devices": [{"index": 1}]}`, "devices[0].index: 1, want 0"},
		{"mig off", `{"devices": [{"mig_mode": 0, "mig_devices": [{}]}]}`, "devices[0].mig_devices: listed, but mig_mode is not 1"},
		{"error path", `{"devices": [], "errors": {"devices[0].memroy": "ERROR_NOT_SUPPORTED"}}`, `errors["devices[0].memroy"]: not a field that can fail`},
		{"error device", `{"devices": [], "errors": {"devices[0].memory": "ERROR_NOT_SUPPORTED"}}`, `there is no devices[0]`},
		{"error code", `{"devices": [{}], "errors": {"devices[0].memory": "NOT_SUPPORTED"}}`, `"NOT_SUPPORTED" is not an NVML error`},
		{"error value", `{"devices": [], "errors": {"driver_version": 3}}`, `errors["driver_version"]: want a string`},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, dir, strings.ReplaceAll(c.name, " ", "_")+".json", c.text)
			_, err := (Options{FixturePath: path}).ReadNVML()
			if err == nil {
				t.Fatalf("no error, want %q", c.want)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "nvml fixture "+path+": ") || !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
				t.Errorf("error %q, want one line naming %s and %q", msg, path, c.want)
			}
		})
	}
	if _, err := (Options{FixturePath: filepath.Join(dir, "absent.json")}).ReadNVML(); err == nil || !strings.Contains(err.Error(), "absent.json") {
		t.Errorf("absent fixture: %v", err)
	}
}

func TestExportNVMLFixtureRefusesExisting(t *testing.T) {
	dir := t.TempDir()
	n := readFixture(t, filepath.Join("..", "fixtures", "nvml", "h100x8.json"))
	target := writeFile(t, dir, "victim", "keep me")
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{target, link} {
		if err := ExportFixture(t.Context(), path, n); err == nil || !strings.Contains(err.Error(), "already exists") {
			t.Errorf("export over %s: %v", path, err)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "keep me" {
		t.Errorf("target overwritten: %q", b)
	}
	out := filepath.Join(dir, "new.json")
	if err := ExportFixture(t.Context(), out, n); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(out); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	var buf bytes.Buffer
	if err := WriteFixture(&buf, snapshot.NVML{Unavailable: "library not found"}); err == nil {
		t.Error("exported an unread NVML")
	}
}

// h200-ghost.json is what `gpusnap snapshot --export-nvml-fixture` wrote on a
// real H200 (driver 580.159.04) after a PyTorch tenant (PID 470) allocated
// 2 GiB, forked a child and exited: NVML still lists the dead tenant, and the
// driver's own share of the memory is what no listed process accounts for.
func TestNVMLFixtureH200Ghost(t *testing.T) {
	n := readFixture(t, filepath.Join("..", "fixtures", "nvml", "h200-ghost.json"))
	if n.DriverVersion != "580.159.04" || n.NVMLVersion != "13.580.159.04" || n.CUDADriverVersion != 13000 || len(n.Devices) != 1 {
		t.Fatalf("nvml %+v", n)
	}
	g := n.Devices[0]
	if g.Name != "NVIDIA H200" || g.Memory == nil || g.Memory.Reserved == nil || len(g.ComputeProcesses) != 1 || g.ComputeProcesses[0].PID != 470 {
		t.Fatalf("gpu %+v", g)
	}
	uses := snapshot.GPUUsage(&snapshot.Snapshot{NVML: n})
	if len(uses) != 1 || len(uses[0].Processes) != 1 || uses[0].Processes[0].Join != snapshot.JoinNone {
		t.Fatalf("the dead tenant must be an orphan: %+v", uses)
	}
	if u := uses[0].Unaccounted; u == nil || *u != 2796355584-2787115008 {
		t.Errorf("unaccounted %v, want used minus the listed process's memory", u)
	}
	// The ghost's context: all the GPU uses, since no live process is listed.
	if u := uses[0].UnaccountedByLive(); u == nil || *u != 2796355584 {
		t.Errorf("unaccounted by live processes %v, want all 2796355584 used", u)
	}
}
