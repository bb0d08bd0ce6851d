package nvmlread

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpusnap/gpusnap/internal/livetest"

	"github.com/gpusnap/gpusnap/snapshot"
)

const gib = uint64(1) << 30

// v1Process is what go-nvml gives from a v1 process list: no instance ids.
func v1Process(pid uint32, used uint64) nvml.ProcessInfo {
	return nvml.ProcessInfo{Pid: pid, UsedGpuMemory: used, GpuInstanceId: math.MaxUint32, ComputeInstanceId: math.MaxUint32}
}

func TestReadNVMLDGXH100(t *testing.T) {
	s := dgxh100.New()
	for i, d := range s.Devices {
		livetest.ServeGPU(d.(*server.Device), v1Process(uint32(1000+i), uint64(i+1)*gib))
	}
	livetest.ServeGPU(s.Devices[7].(*server.Device)) // an idle GPU
	n, err := (Options{Lib: s}).ReadNVML()
	if err != nil {
		t.Fatal(err)
	}
	if n.Source != snapshot.NVMLSourceLibrary || n.Unavailable != "" || n.DriverVersion != "550.54.15" || n.NVMLVersion != "12.550.54.15" || n.CUDADriverVersion != 12040 {
		t.Fatalf("header: %+v", n)
	}
	if len(n.Devices) != 8 || n.Missing != nil {
		t.Fatalf("%d devices, missing %v", len(n.Devices), n.Missing)
	}
	g := n.Devices[2]
	d := s.Devices[2].(*server.Device)
	if g.UUID != d.UUID || g.Name != "NVIDIA H100 80GB HBM3" || *g.MinorNumber != 2 || *g.MIGMode != 0 {
		t.Errorf("gpu 2: %+v", g)
	}
	if g.Memory == nil || g.Memory.Reserved == nil || *g.Memory.Reserved != 512<<20 || g.Memory.Used != 3*gib || g.Memory.Total != d.MemoryInfo.Total {
		t.Errorf("gpu 2 memory: %+v", g.Memory)
	}
	wantProc := []snapshot.GPUProcess{{PID: 1002, UsedGPUMemory: ptr(3 * gib)}}
	if !reflect.DeepEqual(g.ComputeProcesses, wantProc) {
		t.Errorf("gpu 2 processes: %+v", g.ComputeProcesses)
	}
	wantUtil := []snapshot.ProcessUtilization{{PID: 1002, SMUtil: 90, MemUtil: 30, Timestamp: 2}}
	if !reflect.DeepEqual(g.ProcessUtilization, wantUtil) {
		t.Errorf("gpu 2 utilization: %+v", g.ProcessUtilization)
	}
	if g := n.Devices[7]; g.ComputeProcesses != nil || g.ProcessUtilization != nil {
		t.Errorf("idle gpu: %+v", g)
	}
}

func ptr[T any](v T) *T { return &v }

// MIG on, with processes in two MIG instances, built through the dgxa100
// mock's own GPU and compute instances.
func TestReadNVMLDGXA100MIG(t *testing.T) {
	s := dgxa100.New()
	for _, d := range s.Devices {
		livetest.ServeGPU(d.(*server.Device))
	}
	d := s.Devices[0].(*server.Device)
	d.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	type inst struct {
		gi, ci int
		procs  []nvml.ProcessInfo
	}
	var insts []inst
	for k, profile := range []int{nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE} {
		info, ret := d.GetGpuInstanceProfileInfo(profile)
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		gi, _ := d.CreateGpuInstance(&info)
		ciInfo, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		ci, _ := gi.CreateComputeInstance(&ciInfo)
		giInfo, _ := gi.GetInfo()
		cInfo, _ := ci.GetInfo()
		pid := uint32(2000 + k)
		insts = append(insts, inst{int(giInfo.Id), int(cInfo.Id), []nvml.ProcessInfo{{Pid: pid, UsedGpuMemory: gib, GpuInstanceId: giInfo.Id, ComputeInstanceId: cInfo.Id}}})
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return append(append([]nvml.ProcessInfo{}, insts[0].procs...), insts[1].procs...), nvml.SUCCESS
	}
	d.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	const slots = 7 // an A100 has 7 MIG slots; the unused ones answer NOT_FOUND
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return slots, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(slot int) (nvml.Device, nvml.Return) {
		if slot >= len(insts) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		in := insts[slot]
		return &mock.Device{
			GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return in.gi, nvml.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, nvml.Return) { return in.ci, nvml.SUCCESS },
			GetUUIDFunc:              func() (string, nvml.Return) { return fmt.Sprintf("MIG-%d", slot), nvml.SUCCESS },
			GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
				return nvml.Memory_v2{Total: 20 * gib, Used: gib, Free: 19 * gib}, nvml.SUCCESS
			},
			GetComputeRunningProcessesFunc:  func() ([]nvml.ProcessInfo, nvml.Return) { return in.procs, nvml.SUCCESS },
			GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
			// Each instance's process is an MPS client too, listed by the
			// instance's handle.
			GetMPSComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return in.procs, nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	n := readNVML(s, nil)
	g := n.Devices[0]
	if g.MIGMode == nil || *g.MIGMode != 1 || len(g.MIGDevices) != 2 {
		t.Fatalf("MIG mode %v, %d MIG devices", g.MIGMode, len(g.MIGDevices))
	}
	for k, m := range g.MIGDevices {
		in := insts[k]
		if m.GPUInstanceID != in.gi || m.ComputeInstanceID != in.ci || m.UUID != fmt.Sprintf("MIG-%d", k) || m.Memory.Used != gib {
			t.Errorf("MIG device %d: %+v", k, m)
		}
		if len(m.ComputeProcesses) != 1 || m.ComputeProcesses[0].PID != int(in.procs[0].Pid) || *m.ComputeProcesses[0].GPUInstanceID != uint32(in.gi) {
			t.Errorf("MIG device %d processes: %+v", k, m.ComputeProcesses)
		}
		if len(m.MPSProcesses) != 1 || m.MPSProcesses[0].PID != int(in.procs[0].Pid) || *m.MPSProcesses[0].GPUInstanceID != uint32(in.gi) {
			t.Errorf("MIG device %d MPS clients: %+v", k, m.MPSProcesses)
		}
	}
	if len(g.ComputeProcesses) != 2 || *g.ComputeProcesses[1].GPUInstanceID != uint32(insts[1].gi) {
		t.Errorf("parent processes: %+v", g.ComputeProcesses)
	}
	want := map[string]string{"devices[0].process_utilization": "not supported"}
	checkMissing(t, n.Missing, want)
	if n.Devices[1].MIGDevices != nil {
		t.Error("MIG devices on a GPU with MIG off")
	}
}

// mockLib is a host of moq devices whose driver has the symbols syms says
// (nil: all). Calls a test leaves nil panic: they must not be made.
func mockLib(syms func(string) bool, devs ...nvml.Device) *mock.Interface {
	lib := &mock.Interface{
		InitFunc:                       func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:                   func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "470.57.02", nvml.SUCCESS },
		SystemGetNVMLVersionFunc:       func() (string, nvml.Return) { return "11.470.57.02", nvml.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 11040, nvml.SUCCESS },
		DeviceGetCountFunc:             func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc:     func(i int) (nvml.Device, nvml.Return) { return devs[i], nvml.SUCCESS },
	}
	ext := &mock.ExtendedInterface{LookupSymbolFunc: func(name string) error {
		if syms == nil || syms(name) {
			return nil
		}
		return errors.New("undefined symbol " + name)
	}}
	lib.ExtensionsFunc = func() nvml.ExtendedInterface { return ext }
	return lib
}

// mockGPU is a healthy GPU without MIG running procs.
func mockGPU(i int, procs ...nvml.ProcessInfo) *mock.Device {
	return &mock.Device{
		GetUUIDFunc:        func() (string, nvml.Return) { return fmt.Sprintf("GPU-%d", i), nvml.SUCCESS },
		GetNameFunc:        func() (string, nvml.Return) { return "Tesla T4", nvml.SUCCESS },
		GetMinorNumberFunc: func() (int, nvml.Return) { return i, nvml.SUCCESS },
		GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			for k, c := range fmt.Sprintf("00000000:%02X:00.0", i) {
				p.BusId[k] = int8(c)
			}
			return p, nvml.SUCCESS
		},
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{Total: 16 * gib, Reserved: 1 << 20, Used: gib, Free: 15*gib - 1<<20}, nvml.SUCCESS
		},
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 16 * gib, Used: gib, Free: 15 * gib}, nvml.SUCCESS
		},
		GetMigModeFunc:                    func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED },
		GetComputeRunningProcessesFunc:    func() ([]nvml.ProcessInfo, nvml.Return) { return procs, nvml.SUCCESS },
		GetGraphicsRunningProcessesFunc:   func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
		GetMPSComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
		GetProcessUtilizationFunc: func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			return nil, nvml.ERROR_NOT_FOUND
		},
		// Accounting off, as nvidia-smi -am 0 leaves it (the default after a driver load).
		GetAccountingModeFunc: func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_DISABLED, nvml.SUCCESS },
	}
}

func TestReadNVMLGPULostMidRead(t *testing.T) {
	lost := mockGPU(1)
	lost.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, nvml.ERROR_GPU_IS_LOST }
	// Nothing after the memory may be asked of a lost GPU: these would panic.
	lost.GetMemoryInfoFunc, lost.GetMigModeFunc, lost.GetComputeRunningProcessesFunc = nil, nil, nil
	n := readNVML(mockLib(nil, mockGPU(0), lost, mockGPU(2, v1Process(7, gib))), nil)
	if len(n.Devices) != 3 || n.Devices[2].ComputeProcesses[0].PID != 7 {
		t.Fatalf("the GPUs after the lost one were not read: %+v", n.Devices)
	}
	g := n.Devices[1]
	if g.UUID != "GPU-1" || g.PCIBusID != "00000000:01:00.0" || g.Memory != nil || g.MIGMode != nil {
		t.Errorf("lost GPU: %+v", g)
	}
	want := map[string]string{
		"devices[0].mig_mode": "not supported", "devices[2].mig_mode": "not supported",
		"devices[1].memory": "gpu is lost",
	}
	checkMissing(t, n.Missing, want)
}

func TestReadNVMLValueFailures(t *testing.T) {
	g := mockGPU(0, v1Process(10, math.MaxUint64), v1Process(11, gib))
	g.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	g.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NO_PERMISSION }
	g.GetNameFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
	n := readNVML(mockLib(nil, g), nil)
	procs := n.Devices[0].ComputeProcesses
	if len(procs) != 2 || procs[0].UsedGPUMemory != nil || *procs[1].UsedGPUMemory != gib {
		t.Errorf("processes: %+v", procs)
	}
	want := map[string]string{
		"devices[0].name":     "unknown error",
		"devices[0].mig_mode": "not supported",
		"devices[0].compute_processes[0].used_gpu_memory": "not available",
		"devices[0].graphics_processes":                   "no permission",
		"devices[0].process_utilization":                  "not supported",
	}
	checkMissing(t, n.Missing, want)
}

// A driver older than the v2 memory call (and MIG, and MPS lists): the v1
// call is used, Reserved is nil, and no missing symbol is ever called.
func TestReadNVMLOldDriver(t *testing.T) {
	old := map[string]bool{symMemoryV2: true, symMIGMode: true, symMPSProcesses: true, symMPSProcessesV3: true, symCUDAVersion: true}
	g := mockGPU(0, v1Process(10, gib))
	g.GetMemoryInfo_v2Func, g.GetMigModeFunc, g.GetMPSComputeRunningProcessesFunc = nil, nil, nil
	lib := mockLib(func(name string) bool { return !old[name] }, g)
	lib.SystemGetCudaDriverVersionFunc = nil
	n := readNVML(lib, nil)
	m := n.Devices[0].Memory
	if m == nil || m.Reserved != nil || m.Used != gib || m.Total != 16*gib {
		t.Errorf("memory: %+v", m)
	}
	want := map[string]string{
		"cuda_driver_version":        "not in this driver",
		"devices[0].memory.reserved": "not in this driver",
		"devices[0].mig_mode":        "not in this driver",
		"devices[0].mps_processes":   "not in this driver",
	}
	checkMissing(t, n.Missing, want)
}

// Init failing: the reason is recorded, no other call is made (each would
// panic here, as it kills the process with the real library), and
// --require-nvml turns it into an error.
func TestReadNVMLInitFails(t *testing.T) {
	for ret, reason := range map[nvml.Return]string{
		nvml.ERROR_LIBRARY_NOT_FOUND:       "library not found",
		nvml.ERROR_DRIVER_NOT_LOADED:       "driver not loaded",
		nvml.ERROR_NO_PERMISSION:           "no permission",
		nvml.ERROR_LIB_RM_VERSION_MISMATCH: "library and driver versions differ",
		nvml.ERROR_INSUFFICIENT_POWER:      "insufficient power",
		nvml.ERROR_UNKNOWN:                 "unknown error",
		nvml.Return(12345):                 "nvml error 12345",
	} {
		lib := &mock.Interface{InitFunc: func() nvml.Return { return ret }}
		n, err := (Options{Lib: lib}).ReadNVML()
		if err != nil || n.Unavailable != reason || n.Devices != nil {
			t.Errorf("%d: unavailable %q err %v, want %q", ret, n.Unavailable, err, reason)
		}
		_, err = Options{Lib: lib, Require: true}.ReadNVML()
		if err == nil || !strings.Contains(err.Error(), reason) {
			t.Errorf("%d with Require: %v", ret, err)
		}
	}
}

// The real go-nvml library without libnvidia-ml: Init says so and nothing
// else is called (a call would kill this test binary).
func TestReadNVMLRealLibraryMissing(t *testing.T) {
	lib := nvml.New(nvml.WithLibraryPath("/nonexistent/libnvidia-ml.so.1"))
	n, err := (Options{Lib: lib}).ReadNVML()
	if err != nil || n.Unavailable != "library not found" || n.Source != snapshot.NVMLSourceLibrary {
		t.Errorf("unavailable %q source %q err %v", n.Unavailable, n.Source, err)
	}
	if _, err := (Options{Lib: lib, Require: true}).ReadNVML(); err == nil || !strings.Contains(err.Error(), "library not found (--require-nvml)") {
		t.Errorf("require: %v", err)
	}
}

func TestReadNVMLDisabled(t *testing.T) {
	n, err := (Options{Disabled: true}).ReadNVML()
	if err != nil || n.Source != snapshot.NVMLSourceDisabled || n.Unavailable == "" {
		t.Errorf("%+v %v", n, err)
	}
}
