package livetest

import (
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// nvmlHangSource is a libnvidia-ml whose nvmlInit_v2 never returns.
//
//go:embed helper/nvml_hang.c
var nvmlHangSource []byte

// HungNVMLEnteredEnv names, in the environment of a process that loads
// HungNVML's library, a file its nvmlInit_v2 makes before it hangs.
const HungNVMLEnteredEnv = "GPUSNAP_NVML_HANG_ENTERED"

// HungNVML builds, with gcc, a libnvidia-ml.so.1 whose nvmlInit_v2 never
// returns, and returns its directory. A process started with it first on
// LD_LIBRARY_PATH loads it as go-nvml loads the real library (dlopen of
// libnvidia-ml.so.1). Needs gcc only, not root.
func HungNVML(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("live test: gcc is not installed (.ci/run installs it)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "nvml_hang.c")
	if err := os.WriteFile(src, nvmlHangSource, 0o600); err != nil {
		t.Fatalf("livetest: %v", err)
	}
	lib := filepath.Join(dir, "libnvidia-ml.so.1")
	if out, err := exec.Command("gcc", "-O", "-Wall", "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("livetest: gcc nvml_hang.c: %v\n%s", err, out)
	}
	return dir
}

// ServeGPU fills the calls go-nvml's server mocks leave out (process lists,
// utilization, memory v2) for one of their devices. procs are its compute
// processes, and its memory in use is theirs. It is 90% busy while it has
// any, idle without.
func ServeGPU(d *server.Device, procs ...nvml.ProcessInfo) {
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		var used uint64
		for _, p := range procs {
			used += p.UsedGpuMemory
		}
		return nvml.Memory_v2{Total: d.MemoryInfo.Total, Reserved: 512 << 20, Used: used, Free: d.MemoryInfo.Total - used - 512<<20}, nvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return procs, nvml.SUCCESS }
	d.GetAccountingModeFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_DISABLED, nvml.SUCCESS }
	d.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	d.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		if len(procs) == 0 {
			return nvml.Utilization{}, nvml.SUCCESS
		}
		return nvml.Utilization{Gpu: 90, Memory: 30}, nvml.SUCCESS
	}
	d.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		if len(procs) == 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		var out []nvml.ProcessUtilizationSample
		for _, p := range procs {
			// An older sample comes first, and the reader keeps the latest.
			out = append(out, nvml.ProcessUtilizationSample{Pid: p.Pid, TimeStamp: 1, SmUtil: 1},
				nvml.ProcessUtilizationSample{Pid: p.Pid, TimeStamp: 2, SmUtil: 90, MemUtil: 30})
		}
		return out, nvml.SUCCESS
	}
}
