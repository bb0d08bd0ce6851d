package nvmlread

import (
	"fmt"
	"math"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/snapshot"
)

// nvmlCodes name the NVML return codes gpusnap records. The fixture format
// uses the names and Missing uses the reasons. One table holds both, so a
// reason read back from a fixture's errors map is the reason the reader
// wrote.
var nvmlCodes = []struct {
	ret    nvml.Return
	name   string
	reason string
}{
	{nvml.ERROR_UNINITIALIZED, "ERROR_UNINITIALIZED", "not initialized"},
	{nvml.ERROR_INVALID_ARGUMENT, "ERROR_INVALID_ARGUMENT", "invalid argument"},
	{nvml.ERROR_NOT_SUPPORTED, "ERROR_NOT_SUPPORTED", "not supported"},
	{nvml.ERROR_NO_PERMISSION, "ERROR_NO_PERMISSION", "no permission"},
	{nvml.ERROR_NOT_FOUND, "ERROR_NOT_FOUND", "not found"},
	{nvml.ERROR_INSUFFICIENT_POWER, "ERROR_INSUFFICIENT_POWER", "insufficient power"},
	{nvml.ERROR_DRIVER_NOT_LOADED, "ERROR_DRIVER_NOT_LOADED", "driver not loaded"},
	{nvml.ERROR_TIMEOUT, "ERROR_TIMEOUT", "timeout"},
	{nvml.ERROR_IRQ_ISSUE, "ERROR_IRQ_ISSUE", "interrupt problem"},
	{nvml.ERROR_LIBRARY_NOT_FOUND, "ERROR_LIBRARY_NOT_FOUND", "library not found"},
	{nvml.ERROR_FUNCTION_NOT_FOUND, "ERROR_FUNCTION_NOT_FOUND", "not in this driver"},
	{nvml.ERROR_CORRUPTED_INFOROM, "ERROR_CORRUPTED_INFOROM", "corrupted inforom"},
	{nvml.ERROR_GPU_IS_LOST, "ERROR_GPU_IS_LOST", "gpu is lost"},
	{nvml.ERROR_RESET_REQUIRED, "ERROR_RESET_REQUIRED", "gpu reset required"},
	{nvml.ERROR_OPERATING_SYSTEM, "ERROR_OPERATING_SYSTEM", "operating system error"},
	{nvml.ERROR_LIB_RM_VERSION_MISMATCH, "ERROR_LIB_RM_VERSION_MISMATCH", "library and driver versions differ"},
	{nvml.ERROR_IN_USE, "ERROR_IN_USE", "in use"},
	{nvml.ERROR_MEMORY, "ERROR_MEMORY", "out of memory"},
	{nvml.ERROR_NO_DATA, "ERROR_NO_DATA", "no data"},
	{nvml.ERROR_INSUFFICIENT_RESOURCES, "ERROR_INSUFFICIENT_RESOURCES", "insufficient resources"},
	{nvml.ERROR_ARGUMENT_VERSION_MISMATCH, "ERROR_ARGUMENT_VERSION_MISMATCH", "argument version mismatch"},
	{nvml.ERROR_DEPRECATED, "ERROR_DEPRECATED", "deprecated"},
	{nvml.ERROR_NOT_READY, "ERROR_NOT_READY", "not ready"},
	{nvml.ERROR_GPU_NOT_FOUND, "ERROR_GPU_NOT_FOUND", "gpu not found"},
	{nvml.ERROR_INVALID_STATE, "ERROR_INVALID_STATE", "invalid state"},
	{nvml.ERROR_UNKNOWN, "ERROR_UNKNOWN", "unknown error"},
}

// reasonNotAvailable is recorded for values NVML returned but marked as not
// available (used memory all ones, instance ids 0xFFFFFFFF).
const reasonNotAvailable = "not available"

// nvmlReason is the Missing text of an NVML return code.
func nvmlReason(ret nvml.Return) string {
	for _, c := range nvmlCodes {
		if c.ret == ret {
			return c.reason
		}
	}
	return fmt.Sprintf("nvml error %d", int32(ret))
}

// Symbols newer than NVML's oldest calls. A call through go-nvml to a symbol
// the installed driver lacks kills the process in the dynamic linker, so each
// is looked up before use. The process lists and the device count are exempt,
// as go-nvml itself picks the newest version the driver has when it loads.
const (
	symMemoryV2       = "nvmlDeviceGetMemoryInfo_v2"
	symCUDAVersion    = "nvmlSystemGetCudaDriverVersion"
	symUtilization    = "nvmlDeviceGetProcessUtilization"
	symMIGMode        = "nvmlDeviceGetMigMode"
	symMaxMIG         = "nvmlDeviceGetMaxMigDeviceCount"
	symMIGHandle      = "nvmlDeviceGetMigDeviceHandleByIndex"
	symGPUInstanceID  = "nvmlDeviceGetGpuInstanceId"
	symComputeInstID  = "nvmlDeviceGetComputeInstanceId"
	symMPSProcesses   = "nvmlDeviceGetMPSComputeRunningProcesses"
	symMPSProcessesV3 = "nvmlDeviceGetMPSComputeRunningProcesses_v3"
)

// readNVML reads NVML's view through lib, the real library, a fixture or a
// mock. It initializes lib itself and makes no other call when Init fails.
// With sm (a Sampler's read) it also reads each GPU's own utilization and
// the per-process samples since sm's last read.
func readNVML(lib nvml.Interface, sm *sampling) snapshot.NVML {
	var n snapshot.NVML
	if ret := lib.Init(); ret != nvml.SUCCESS {
		n.Unavailable = nvmlReason(ret)
		return n
	}
	defer lib.Shutdown() //nolint:errcheck // nothing to do if it fails: everything was read
	r := &nvmlReader{lib: lib, ext: lib.Extensions(), n: &n, syms: map[string]bool{}, sampling: sm}
	r.read()
	return n
}

type nvmlReader struct {
	lib      nvml.Interface
	ext      nvml.ExtendedInterface
	n        *snapshot.NVML
	syms     map[string]bool
	sampling *sampling // nil in a snapshot's read
}

// has reports whether the driver exports any of the symbols.
func (r *nvmlReader) has(names ...string) bool {
	for _, name := range names {
		ok, seen := r.syms[name]
		if !seen {
			ok = r.ext.LookupSymbol(name) == nil
			r.syms[name] = ok
		}
		if ok {
			return true
		}
	}
	return false
}

func (r *nvmlReader) missing(path string, why string) {
	if r.n.Missing == nil {
		r.n.Missing = map[string]string{}
	}
	r.n.Missing[path] = why
}

// ok reports whether ret is SUCCESS, else records why path is missing.
func (r *nvmlReader) ok(path string, ret nvml.Return) bool {
	if ret == nvml.SUCCESS {
		return true
	}
	r.missing(path, nvmlReason(ret))
	return false
}

func (r *nvmlReader) read() {
	if v, ret := r.lib.SystemGetDriverVersion(); r.ok("driver_version", ret) {
		r.n.DriverVersion = v
	}
	if v, ret := r.lib.SystemGetNVMLVersion(); r.ok("nvml_version", ret) {
		r.n.NVMLVersion = v
	}
	if !r.has(symCUDAVersion) {
		r.missing("cuda_driver_version", nvmlReason(nvml.ERROR_FUNCTION_NOT_FOUND))
	} else if v, ret := r.lib.SystemGetCudaDriverVersion(); r.ok("cuda_driver_version", ret) {
		r.n.CUDADriverVersion = v
	}
	count, ret := r.lib.DeviceGetCount()
	if !r.ok("devices", ret) {
		return
	}
	r.n.Devices = make([]snapshot.GPU, 0, count)
	for i := 0; i < count; i++ {
		r.n.Devices = append(r.n.Devices, r.gpu(i))
	}
}

// deviceReader reads one GPU or MIG device. After GPU_IS_LOST it reads
// nothing more of that device. What was read before is kept, the value that
// failed is recorded, and the other GPUs go on.
type deviceReader struct {
	*nvmlReader
	dev  nvml.Device
	path string
	lost bool
}

// ok reports whether a value of the device can be used. Field "" is the device itself.
func (d *deviceReader) ok(field string, ret nvml.Return) bool {
	path := d.path
	if field != "" {
		path += "." + field
	}
	if ret == nvml.ERROR_GPU_IS_LOST {
		d.lost = true
	}
	return d.nvmlReader.ok(path, ret)
}

// run reads values in order until the device is lost.
func (d *deviceReader) run(steps []func()) {
	for _, step := range steps {
		if d.lost {
			return
		}
		step()
	}
}

// supported records field as missing when the driver lacks all of syms.
func (d *deviceReader) supported(field string, syms ...string) bool {
	if d.has(syms...) {
		return true
	}
	d.missing(d.path+"."+field, nvmlReason(nvml.ERROR_FUNCTION_NOT_FOUND))
	return false
}

func (r *nvmlReader) gpu(i int) snapshot.GPU {
	g := snapshot.GPU{Index: i}
	d := &deviceReader{nvmlReader: r, path: snapshot.DeviceKey(i)}
	dev, ret := r.lib.DeviceGetHandleByIndex(i)
	if !d.ok("", ret) {
		return g
	}
	d.dev = dev
	var migOn bool
	steps := []func(){
		func() {
			if v, ret := dev.GetUUID(); d.ok("uuid", ret) {
				g.UUID = v
			}
		},
		func() {
			if v, ret := dev.GetName(); d.ok("name", ret) {
				g.Name = v
			}
		},
		func() {
			if v, ret := dev.GetMinorNumber(); d.ok("minor_number", ret) {
				g.MinorNumber = &v
			}
		},
		func() {
			if v, ret := dev.GetPciInfo(); d.ok("pci_bus_id", ret) {
				g.PCIBusID = safetext.FromC(v.BusId[:])
				if g.PCIBusID == "" {
					g.PCIBusID = safetext.FromC(v.BusIdLegacy[:])
				}
			}
		},
		func() { g.Memory = d.memory() },
		// MIG mode is read before the processes, as it says whether their instance ids matter.
		func() {
			if !d.supported("mig_mode", symMIGMode) {
				return
			}
			if current, _, ret := dev.GetMigMode(); d.ok("mig_mode", ret) {
				g.MIGMode = &current
				migOn = current == nvml.DEVICE_MIG_ENABLE
			}
		},
		func() { g.ComputeProcesses = d.processes("compute_processes", migOn, dev.GetComputeRunningProcesses) },
		func() {
			g.GraphicsProcesses = d.processes("graphics_processes", migOn, dev.GetGraphicsRunningProcesses)
		},
		func() {
			if d.supported("mps_processes", symMPSProcesses, symMPSProcessesV3) {
				g.MPSProcesses = d.processes("mps_processes", migOn, dev.GetMPSComputeRunningProcesses)
			}
		},
		func() { g.ProcessUtilization = d.utilization(g.UUID) },
		func() { g.Utilization = d.rates() },
		func() { g.AccountingMode, g.Accounting = d.accounting() },
		func() {
			if migOn {
				g.MIGDevices = d.migDevices()
			}
		},
	}
	d.run(steps)
	return g
}

// memory reads the v2 call where the driver has it (it splits out the
// memory the driver reserves), else v1, where Reserved stays nil.
func (d *deviceReader) memory() *snapshot.Memory {
	reservedWhy := nvml.ERROR_FUNCTION_NOT_FOUND
	if d.has(symMemoryV2) {
		m, ret := d.dev.GetMemoryInfo_v2()
		if ret == nvml.SUCCESS {
			return &snapshot.Memory{Total: m.Total, Reserved: &m.Reserved, Used: m.Used, Free: m.Free}
		}
		if ret == nvml.ERROR_GPU_IS_LOST {
			d.ok("memory", ret)
			return nil
		}
		reservedWhy = ret
	}
	m, ret := d.dev.GetMemoryInfo()
	if !d.ok("memory", ret) {
		return nil
	}
	d.ok("memory.reserved", reservedWhy)
	return &snapshot.Memory{Total: m.Total, Used: m.Used, Free: m.Free}
}

// processes converts a process list. instanceIDs says whether missing
// GPU/compute instance ids are worth recording, since with MIG off NVML
// never has them.
func (d *deviceReader) processes(field string, instanceIDs bool, get func() ([]nvml.ProcessInfo, nvml.Return)) []snapshot.GPUProcess {
	list, ret := get()
	if !d.ok(field, ret) || len(list) == 0 {
		return nil
	}
	out := make([]snapshot.GPUProcess, len(list))
	for k, p := range list {
		path := fmt.Sprintf("%s.%s[%d]", d.path, field, k)
		gp := snapshot.GPUProcess{PID: int(p.Pid)}
		if p.UsedGpuMemory == math.MaxUint64 {
			d.missing(path+".used_gpu_memory", reasonNotAvailable)
		} else {
			gp.UsedGPUMemory = &p.UsedGpuMemory
		}
		gp.GPUInstanceID = d.instanceID(path+".gpu_instance_id", p.GpuInstanceId, instanceIDs)
		gp.ComputeInstanceID = d.instanceID(path+".compute_instance_id", p.ComputeInstanceId, instanceIDs)
		out[k] = gp
	}
	return out
}

func (d *deviceReader) instanceID(path string, id uint32, record bool) *uint32 {
	if id != math.MaxUint32 {
		return &id
	}
	if record {
		d.missing(path, reasonNotAvailable)
	}
	return nil
}

// utilization keeps the latest sample of each process, sorted by PID. NVML's
// buffer holds several per process, and the latest is what nvidia-smi shows.
// A Sampler's read keeps instead every sample newer than the last it saw of
// this GPU, sorted by PID and time. NVML's lastSeenTimeStamp chains the
// reads, so none is counted twice and none lost between them.
func (d *deviceReader) utilization(uuid string) []snapshot.ProcessUtilization {
	if !d.supported("process_utilization", symUtilization) {
		return nil
	}
	var last uint64
	if d.sampling != nil {
		last = d.sampling.since[uuid]
	}
	samples, ret := d.dev.GetProcessUtilization(last)
	if ret == nvml.ERROR_NOT_FOUND || (ret == nvml.SUCCESS && len(samples) == 0) {
		return nil // no process ran in the sampling window
	}
	if !d.ok("process_utilization", ret) {
		return nil
	}
	if d.sampling != nil {
		return d.sampling.newer(uuid, samples)
	}
	latest := map[uint32]nvml.ProcessUtilizationSample{}
	for _, s := range samples {
		if old, seen := latest[s.Pid]; !seen || s.TimeStamp >= old.TimeStamp {
			latest[s.Pid] = s
		}
	}
	out := make([]snapshot.ProcessUtilization, 0, len(latest))
	for _, s := range latest {
		out = append(out, utilizationOf(s))
	}
	sort.Slice(out, func(a, b int) bool { return out[a].PID < out[b].PID })
	return out
}

func utilizationOf(s nvml.ProcessUtilizationSample) snapshot.ProcessUtilization {
	return snapshot.ProcessUtilization{PID: int(s.Pid), SMUtil: s.SmUtil, MemUtil: s.MemUtil,
		EncUtil: s.EncUtil, DecUtil: s.DecUtil, Timestamp: s.TimeStamp}
}

// rates reads the device's own utilization, in a Sampler's read only, since
// a snapshot has no use for one second's figure.
func (d *deviceReader) rates() *snapshot.Utilization {
	if d.sampling == nil {
		return nil
	}
	u, ret := d.dev.GetUtilizationRates()
	if !d.ok("utilization", ret) {
		return nil
	}
	return &snapshot.Utilization{GPU: u.Gpu, Memory: u.Memory}
}

// maxAccounting bounds the accounting records read per GPU. The driver's
// buffer holds 4,000 by default (nvmlDeviceGetAccountingBufferSize).
const maxAccounting = 4096

// accounting reads the accounting mode and, where it is on, the driver's
// record of every process in its buffer, running or exited. A PID whose
// record cannot be read is recorded as missing, and the others are kept.
func (d *deviceReader) accounting() (string, []snapshot.AccountingStats) {
	mode, ret := d.dev.GetAccountingMode()
	if !d.ok("accounting_mode", ret) {
		return "", nil
	}
	if mode != nvml.FEATURE_ENABLED {
		return snapshot.AccountingDisabled, nil
	}
	pids, ret := d.dev.GetAccountingPids()
	if !d.ok("accounting", ret) {
		return snapshot.AccountingEnabled, nil
	}
	if len(pids) > maxAccounting {
		d.missing(d.path+".accounting", fmt.Sprintf("%d records past the first %d not read", len(pids)-maxAccounting, maxAccounting))
		pids = pids[:maxAccounting]
	}
	var out []snapshot.AccountingStats
	for _, pid := range pids {
		st, ret := d.dev.GetAccountingStats(uint32(pid))
		if ret != nvml.SUCCESS {
			d.ok(fmt.Sprintf("accounting[pid %d]", pid), ret)
			if d.lost {
				break
			}
			continue
		}
		a := snapshot.AccountingStats{PID: pid, Time: st.Time, StartTime: st.StartTime, IsRunning: st.IsRunning != 0}
		if st.GpuUtilization != math.MaxUint32 {
			a.GPUUtilization = &st.GpuUtilization
		}
		if st.MemoryUtilization != math.MaxUint32 {
			a.MemoryUtilization = &st.MemoryUtilization
		}
		if st.MaxMemoryUsage != math.MaxUint64 {
			a.MaxMemoryUsage = &st.MaxMemoryUsage
		}
		out = append(out, a)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].PID < out[b].PID })
	return snapshot.AccountingEnabled, out
}

// migDevices reads the MIG devices of a GPU in MIG mode. Empty slots answer
// NOT_FOUND, and any other failure ends the walk and is recorded on
// mig_devices.
func (d *deviceReader) migDevices() []snapshot.MIGDevice {
	if !d.supported("mig_devices", symMaxMIG, symMIGHandle) {
		return nil
	}
	slots, ret := d.dev.GetMaxMigDeviceCount()
	if !d.ok("mig_devices", ret) {
		return nil
	}
	var out []snapshot.MIGDevice
	for slot := 0; slot < slots; slot++ {
		h, ret := d.dev.GetMigDeviceHandleByIndex(slot)
		if ret == nvml.ERROR_NOT_FOUND {
			continue
		}
		if !d.ok("mig_devices", ret) {
			break
		}
		m := &deviceReader{nvmlReader: d.nvmlReader, dev: h, path: snapshot.MIGKey(d.path, len(out))}
		out = append(out, m.migDevice())
		if m.lost {
			d.lost = true // a MIG device is lost with its GPU
			break
		}
	}
	return out
}

func (m *deviceReader) migDevice() snapshot.MIGDevice {
	var md snapshot.MIGDevice
	m.run([]func(){
		func() {
			if !m.supported("gpu_instance_id", symGPUInstanceID) {
				return
			}
			if v, ret := m.dev.GetGpuInstanceId(); m.ok("gpu_instance_id", ret) {
				md.GPUInstanceID = v
			}
		},
		func() {
			if !m.supported("compute_instance_id", symComputeInstID) {
				return
			}
			if v, ret := m.dev.GetComputeInstanceId(); m.ok("compute_instance_id", ret) {
				md.ComputeInstanceID = v
			}
		},
		func() {
			if v, ret := m.dev.GetUUID(); m.ok("uuid", ret) {
				md.UUID = v
			}
		},
		func() { md.Memory = m.memory() },
		func() { md.ComputeProcesses = m.processes("compute_processes", true, m.dev.GetComputeRunningProcesses) },
		func() {
			md.GraphicsProcesses = m.processes("graphics_processes", true, m.dev.GetGraphicsRunningProcesses)
		},
		// The parent GPU lists an MPS client on a MIG instance only to a
		// caller NVML deems privileged, the instance's own handle to all.
		func() {
			if m.supported("mps_processes", symMPSProcesses, symMPSProcessesV3) {
				md.MPSProcesses = m.processes("mps_processes", true, m.dev.GetMPSComputeRunningProcesses)
			}
		},
		func() { md.Utilization = m.rates() },
	})
	return md
}
