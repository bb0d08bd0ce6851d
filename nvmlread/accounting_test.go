package nvmlread

import (
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpusnap/gpusnap/snapshot"
)

// accountingGPU is a GPU with accounting on whose buffer holds stats by PID;
// a PID without stats answers NOT_FOUND, as NVML does for a record it dropped.
func accountingGPU(i int, pids []int, stats map[int]nvml.AccountingStats) *mock.Device {
	g := mockGPU(i)
	g.GetAccountingModeFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_ENABLED, nvml.SUCCESS }
	g.GetAccountingPidsFunc = func() ([]int, nvml.Return) { return pids, nvml.SUCCESS }
	g.GetAccountingStatsFunc = func(pid uint32) (nvml.AccountingStats, nvml.Return) {
		st, ok := stats[int(pid)]
		if !ok {
			return nvml.AccountingStats{}, nvml.ERROR_NOT_FOUND
		}
		return st, nvml.SUCCESS
	}
	return g
}

func TestReadNVMLAccounting(t *testing.T) {
	on := accountingGPU(0, []int{4343, 4242, 5000}, map[int]nvml.AccountingStats{
		// 4242 ran for 90 s and exited; 4343 still runs; 5000's record is gone.
		4242: {GpuUtilization: 97, MemoryUtilization: 41, MaxMemoryUsage: 20 * gib, Time: 90_000, StartTime: 1_764_500_000_000_000},
		4343: {GpuUtilization: 3, MemoryUtilization: math.MaxUint32, MaxMemoryUsage: math.MaxUint64, Time: 1_000, StartTime: 1_764_500_100_000_000, IsRunning: 1},
	})
	off := mockGPU(1)
	unsupported := mockGPU(2)
	unsupported.GetAccountingModeFunc = func() (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	// Accounting off: no PID list may be asked for (a nil Func panics).
	n := readNVML(mockLib(nil, on, off, unsupported), nil)

	want := []snapshot.AccountingStats{
		{PID: 4242, GPUUtilization: ptr(uint32(97)), MemoryUtilization: ptr(uint32(41)), MaxMemoryUsage: ptr(20 * gib), Time: 90_000, StartTime: 1_764_500_000_000_000},
		{PID: 4343, GPUUtilization: ptr(uint32(3)), Time: 1_000, StartTime: 1_764_500_100_000_000, IsRunning: true},
	}
	if g := n.Devices[0]; g.AccountingMode != snapshot.AccountingEnabled || !reflect.DeepEqual(g.Accounting, want) {
		t.Errorf("accounting on: %q %+v", g.AccountingMode, g.Accounting)
	}
	if g := n.Devices[1]; g.AccountingMode != snapshot.AccountingDisabled || g.Accounting != nil {
		t.Errorf("accounting off: %q %+v", g.AccountingMode, g.Accounting)
	}
	if g := n.Devices[2]; g.AccountingMode != "" || g.Accounting != nil {
		t.Errorf("accounting not supported: %q %+v", g.AccountingMode, g.Accounting)
	}
	checkMissing(t, n.Missing, map[string]string{
		"devices[0].mig_mode": "not supported", "devices[1].mig_mode": "not supported", "devices[2].mig_mode": "not supported",
		"devices[0].accounting[pid 5000]": "not found",
		"devices[2].accounting_mode":      "not supported",
	})

	// The fixture format carries it all, and replays it.
	exported := exportAndReload(t, n)
	if !reflect.DeepEqual(exported.Devices[0].Accounting, want) || exported.Devices[1].AccountingMode != snapshot.AccountingDisabled ||
		exported.Missing["devices[0].accounting[pid 5000]"] != "not found" || exported.Missing["devices[2].accounting_mode"] != "not supported" {
		t.Errorf("fixture round trip: %+v missing %v", exported.Devices, exported.Missing)
	}
}

// exportAndReload writes n as a fixture and reads it back.
func exportAndReload(t *testing.T, n snapshot.NVML) snapshot.NVML {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nvml.json")
	if err := ExportFixture(t.Context(), path, n); err != nil {
		t.Fatal(err)
	}
	return readFixture(t, path)
}

func TestNVMLFixtureAccountingChecks(t *testing.T) {
	for _, tc := range []struct{ json, err string }{
		{`{"devices":[{"accounting_mode":"on"}]}`, `devices[0].accounting_mode: "on", want "enabled" or "disabled"`},
		{`{"devices":[{"accounting_mode":"disabled","accounting":[{"pid":1}]}]}`, `devices[0].accounting: listed, but accounting_mode is not "enabled"`},
		{`{"devices":[{"accounting_mode":"enabled","accounting":[{"pid":1},{"pid":1}]}]}`, `devices[0].accounting[1].pid: 1 is not a PID, or is listed twice`},
		{`{"devices":[{"accounting_mode":"enabled","accounting":[{"pid":1,"gpu_utilization":101}]}]}`, `devices[0].accounting[0].gpu_utilization: 101, want a percentage`},
	} {
		_, err := parseNVMLFixture([]byte(tc.json))
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.json, err, tc.err)
		}
	}
}
