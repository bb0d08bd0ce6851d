package nvmlread

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpusnap/gpusnap/snapshot"
)

// fixtureLib serves a fixture through nvml.Interface, so readNVML has one
// path for the library, fixtures and mocks.
//
// It embeds the nvml interfaces (nil) and implements only the calls readNVML
// makes, as plain methods instead of go-nvml's locking moq mocks. A call it
// does not serve hits the nil interface and panics in the fixture tests,
// never in silence.
type fixtureLib struct {
	nvml.Interface
	f *nvmlFixture
	// devices are the state served, the fixture's devices or, in a replay,
	// the series entry due (replayAt).
	devices []snapshot.GPU
	// stamp, in a replay, is the time (microseconds) given the per-process
	// samples that have none, so that each read finds them new.
	stamp uint64
}

// replayAt serves the state a watch started at start samples at now, which
// is the last series entry whose offset has passed, else the fixture's
// devices.
func (l *fixtureLib) replayAt(now, start time.Time) {
	at := now.Sub(start).Seconds()
	for i := range l.f.Series {
		if l.f.Series[i].At <= at {
			l.devices = l.f.Series[i].Devices
		}
	}
	l.stamp = uint64(now.UnixMicro())
}

var (
	_ nvml.Interface         = (*fixtureLib)(nil)
	_ nvml.ExtendedInterface = (*fixtureLib)(nil)
	_ nvml.Device            = (*fixtureGPU)(nil)
	_ nvml.Device            = (*fixtureMIG)(nil)
)

// fail is the error the fixture gives for path, or SUCCESS.
func (l *fixtureLib) fail(path string) nvml.Return {
	if name, ok := l.f.Errors[path]; ok {
		ret, _ := nvmlCodeByName(name) // checked when the fixture was loaded
		return ret
	}
	return nvml.SUCCESS
}

// answer is the fixture's error for path, else NOT_SUPPORTED when the
// value is not reported, else SUCCESS.
func (l *fixtureLib) answer(path string, reported bool) nvml.Return {
	if ret := l.fail(path); ret != nvml.SUCCESS {
		return ret
	}
	if !reported {
		return nvml.ERROR_NOT_SUPPORTED
	}
	return nvml.SUCCESS
}

func (l *fixtureLib) Init() nvml.Return                  { return nvml.SUCCESS }
func (l *fixtureLib) Shutdown() nvml.Return              { return nvml.SUCCESS }
func (l *fixtureLib) Extensions() nvml.ExtendedInterface { return l }
func (l *fixtureLib) LookupSymbol(string) error          { return nil } // a fixture has every call
func (l *fixtureLib) SystemGetDriverVersion() (string, nvml.Return) {
	return l.f.DriverVersion, l.answer("driver_version", l.f.DriverVersion != "")
}
func (l *fixtureLib) SystemGetNVMLVersion() (string, nvml.Return) {
	return l.f.NVMLVersion, l.answer("nvml_version", l.f.NVMLVersion != "")
}
func (l *fixtureLib) SystemGetCudaDriverVersion() (int, nvml.Return) {
	return l.f.CUDADriverVersion, l.answer("cuda_driver_version", l.f.CUDADriverVersion != 0)
}
func (l *fixtureLib) DeviceGetCount() (int, nvml.Return) {
	return len(l.devices), l.fail("devices")
}
func (l *fixtureLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if i < 0 || i >= len(l.devices) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	g := &l.devices[i]
	path := snapshot.DeviceKey(i)
	if ret := l.fail(path); ret != nvml.SUCCESS {
		return nil, ret
	}
	return &fixtureGPU{fixtureDev: fixtureDev{lib: l, path: path, uuid: g.UUID, mem: g.Memory, util: g.Utilization,
		compute: g.ComputeProcesses, graphics: g.GraphicsProcesses, mps: g.MPSProcesses}, g: g}, nvml.SUCCESS
}

// fixtureDev answers the calls a GPU and a MIG device share.
type fixtureDev struct {
	nvml.Device
	lib                    *fixtureLib
	path                   string
	uuid                   string
	mem                    *snapshot.Memory
	util                   *snapshot.Utilization
	compute, graphics, mps []snapshot.GPUProcess
}

func (d *fixtureDev) answer(field string, reported bool) nvml.Return {
	return d.lib.answer(d.path+"."+field, reported)
}

func (d *fixtureDev) GetUUID() (string, nvml.Return) { return d.uuid, d.answer("uuid", d.uuid != "") }

func (d *fixtureDev) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	if ret := d.answer("memory", d.mem != nil); ret != nvml.SUCCESS {
		return nvml.Memory{}, ret
	}
	return nvml.Memory{Total: d.mem.Total, Used: d.mem.Used, Free: d.mem.Free}, nvml.SUCCESS
}

// GetMemoryInfo_v2 fails as v1 does, and answers NOT_SUPPORTED (or the
// fixture's memory.reserved error) where reserved is not reported.
func (d *fixtureDev) GetMemoryInfo_v2() (nvml.Memory_v2, nvml.Return) {
	if ret := d.answer("memory", d.mem != nil); ret != nvml.SUCCESS {
		return nvml.Memory_v2{}, ret
	}
	if ret := d.answer("memory.reserved", d.mem.Reserved != nil); ret != nvml.SUCCESS {
		return nvml.Memory_v2{}, ret
	}
	return nvml.Memory_v2{Total: d.mem.Total, Reserved: *d.mem.Reserved, Used: d.mem.Used, Free: d.mem.Free}, nvml.SUCCESS
}

func (d *fixtureDev) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	if ret := d.answer("utilization", d.util != nil); ret != nvml.SUCCESS {
		return nvml.Utilization{}, ret
	}
	return nvml.Utilization{Gpu: d.util.GPU, Memory: d.util.Memory}, nvml.SUCCESS
}

func (d *fixtureDev) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return d.processes("compute_processes", d.compute)
}

func (d *fixtureDev) GetGraphicsRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return d.processes("graphics_processes", d.graphics)
}

func (d *fixtureDev) GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return d.processes("mps_processes", d.mps)
}

// processes gives NVML's markers for what the fixture leaves out, used
// memory all ones and instance ids 0xFFFFFFFF. An absent list is an empty
// one.
func (d *fixtureDev) processes(field string, list []snapshot.GPUProcess) ([]nvml.ProcessInfo, nvml.Return) {
	if ret := d.lib.fail(d.path + "." + field); ret != nvml.SUCCESS {
		return nil, ret
	}
	out := make([]nvml.ProcessInfo, len(list))
	for k, p := range list {
		out[k] = nvml.ProcessInfo{Pid: uint32(p.PID), UsedGpuMemory: math.MaxUint64,
			GpuInstanceId: math.MaxUint32, ComputeInstanceId: math.MaxUint32}
		if p.UsedGPUMemory != nil {
			out[k].UsedGpuMemory = *p.UsedGPUMemory
		}
		if p.GPUInstanceID != nil {
			out[k].GpuInstanceId = *p.GPUInstanceID
		}
		if p.ComputeInstanceID != nil {
			out[k].ComputeInstanceId = *p.ComputeInstanceID
		}
	}
	return out, nvml.SUCCESS
}

// fixtureGPU is a physical GPU of a fixture.
type fixtureGPU struct {
	fixtureDev
	g *snapshot.GPU
}

func (d *fixtureGPU) GetName() (string, nvml.Return) {
	return d.g.Name, d.answer("name", d.g.Name != "")
}

func (d *fixtureGPU) GetMinorNumber() (int, nvml.Return) {
	if ret := d.answer("minor_number", d.g.MinorNumber != nil); ret != nvml.SUCCESS {
		return 0, ret
	}
	return *d.g.MinorNumber, nvml.SUCCESS
}

func (d *fixtureGPU) GetPciInfo() (nvml.PciInfo, nvml.Return) {
	var p nvml.PciInfo
	for i := 0; i < len(d.g.PCIBusID) && i < len(p.BusId)-1; i++ {
		p.BusId[i] = int8(d.g.PCIBusID[i])
	}
	return p, d.answer("pci_bus_id", d.g.PCIBusID != "")
}

func (d *fixtureGPU) GetMigMode() (int, int, nvml.Return) {
	if ret := d.answer("mig_mode", d.g.MIGMode != nil); ret != nvml.SUCCESS {
		return 0, 0, ret
	}
	return *d.g.MIGMode, *d.g.MIGMode, nvml.SUCCESS
}

// GetProcessUtilization answers NOT_FOUND when there are no samples, as NVML
// does when no process ran in its sampling window.
func (d *fixtureGPU) GetProcessUtilization(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	if ret := d.lib.fail(d.path + ".process_utilization"); ret != nvml.SUCCESS {
		return nil, ret
	}
	if len(d.g.ProcessUtilization) == 0 {
		return nil, nvml.ERROR_NOT_FOUND
	}
	out := make([]nvml.ProcessUtilizationSample, len(d.g.ProcessUtilization))
	for k, u := range d.g.ProcessUtilization {
		out[k] = nvml.ProcessUtilizationSample{Pid: uint32(u.PID), TimeStamp: cmp.Or(u.Timestamp, d.lib.stamp),
			SmUtil: u.SMUtil, MemUtil: u.MemUtil, EncUtil: u.EncUtil, DecUtil: u.DecUtil}
	}
	return out, nvml.SUCCESS
}

func (d *fixtureGPU) GetAccountingMode() (nvml.EnableState, nvml.Return) {
	if ret := d.answer("accounting_mode", d.g.AccountingMode != ""); ret != nvml.SUCCESS {
		return nvml.FEATURE_DISABLED, ret
	}
	if d.g.AccountingMode == snapshot.AccountingEnabled {
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	return nvml.FEATURE_DISABLED, nvml.SUCCESS
}

func (d *fixtureGPU) GetAccountingPids() ([]int, nvml.Return) {
	if ret := d.lib.fail(d.path + ".accounting"); ret != nvml.SUCCESS {
		return nil, ret
	}
	pids := make([]int, 0, len(d.g.Accounting))
	for _, a := range d.g.Accounting {
		pids = append(pids, a.PID)
	}
	// A PID whose record failed is in the driver's list too, and the error says which.
	prefix := d.path + ".accounting[pid "
	for _, key := range sortedKeys(d.lib.f.Errors) {
		if n, ok := strings.CutPrefix(key, prefix); ok {
			if pid, err := strconv.Atoi(strings.TrimSuffix(n, "]")); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids, nvml.SUCCESS
}

// GetAccountingStats gives NVML's not-available markers (all ones) for the
// figures the fixture leaves out, and NOT_FOUND for a PID it does not list.
func (d *fixtureGPU) GetAccountingStats(pid uint32) (nvml.AccountingStats, nvml.Return) {
	if ret := d.lib.fail(fmt.Sprintf("%s.accounting[pid %d]", d.path, pid)); ret != nvml.SUCCESS {
		return nvml.AccountingStats{}, ret
	}
	for _, a := range d.g.Accounting {
		if a.PID != int(pid) {
			continue
		}
		st := nvml.AccountingStats{GpuUtilization: math.MaxUint32, MemoryUtilization: math.MaxUint32, MaxMemoryUsage: math.MaxUint64,
			Time: a.Time, StartTime: a.StartTime}
		if a.GPUUtilization != nil {
			st.GpuUtilization = *a.GPUUtilization
		}
		if a.MemoryUtilization != nil {
			st.MemoryUtilization = *a.MemoryUtilization
		}
		if a.MaxMemoryUsage != nil {
			st.MaxMemoryUsage = *a.MaxMemoryUsage
		}
		if a.IsRunning {
			st.IsRunning = 1
		}
		return st, nvml.SUCCESS
	}
	return nvml.AccountingStats{}, nvml.ERROR_NOT_FOUND
}

// GetMaxMigDeviceCount counts one slot more than the fixture lists when it
// has an error for mig_devices, and that slot is the one that fails.
func (d *fixtureGPU) GetMaxMigDeviceCount() (int, nvml.Return) {
	n := len(d.g.MIGDevices)
	if d.lib.fail(d.path+".mig_devices") != nvml.SUCCESS {
		n++
	}
	return n, nvml.SUCCESS
}

func (d *fixtureGPU) GetMigDeviceHandleByIndex(slot int) (nvml.Device, nvml.Return) {
	if slot == len(d.g.MIGDevices) {
		if ret := d.lib.fail(d.path + ".mig_devices"); ret != nvml.SUCCESS {
			return nil, ret
		}
	}
	if slot < 0 || slot >= len(d.g.MIGDevices) {
		return nil, nvml.ERROR_NOT_FOUND
	}
	m := &d.g.MIGDevices[slot]
	return &fixtureMIG{fixtureDev: fixtureDev{lib: d.lib, path: snapshot.MIGKey(d.path, slot), uuid: m.UUID, mem: m.Memory, util: m.Utilization,
		compute: m.ComputeProcesses, graphics: m.GraphicsProcesses, mps: m.MPSProcesses}, m: m}, nvml.SUCCESS
}

// fixtureMIG is a MIG device of a fixture GPU.
type fixtureMIG struct {
	fixtureDev
	m *snapshot.MIGDevice
}

func (d *fixtureMIG) GetGpuInstanceId() (int, nvml.Return) {
	return d.m.GPUInstanceID, d.lib.fail(d.path + ".gpu_instance_id")
}

func (d *fixtureMIG) GetComputeInstanceId() (int, nvml.Return) {
	return d.m.ComputeInstanceID, d.lib.fail(d.path + ".compute_instance_id")
}
