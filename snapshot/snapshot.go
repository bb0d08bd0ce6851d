// Package snapshot captures the GPU-relevant state of a Linux host, that is
// every process's identity, device mappings and device holders from /proc,
// and NVML's view of the GPUs. A Snapshot is plain data. It is stored,
// diffed and bundled by other packages, and round-trips through JSON
// unchanged.
package snapshot

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// Labels of a snapshot say what it was taken for.
const (
	LabelSnapshot = "snapshot" // gpusnap snapshot
	LabelBaseline = "baseline" // gpusnap baseline, before a tenant runs
	LabelPost     = "post"     // the capture gpusnap diff makes after a tenant
)

// Snapshot is one capture of the host.
type Snapshot struct {
	ID     string `json:"id"`
	Label  string `json:"label"`
	Tenant string `json:"tenant,omitempty"`
	// Allocation is the GPUs the scheduler gave Tenant (baseline --gpus, or
	// the Slurm prolog's environment), nil when no one said.
	Allocation *GPUSet   `json:"allocation,omitempty"`
	Host       Host      `json:"host"`
	Scan       Scan      `json:"scan"`
	Processes  []Process `json:"processes"`
	NVML       NVML      `json:"nvml"`
	// Accelerators are the other vendors' devices, from the kernel (accel.go).
	Accelerators *Accelerators `json:"accelerators,omitempty"`
	// KernelLog is where the kernel log stood, so that a diff reads the records
	// between two snapshots' positions. Nil in snapshots taken before
	// gpusnap kept it.
	KernelLog *KernelLogPosition `json:"kernel_log,omitempty"`
}

// KernelLogPosition is where a kernel log stood when a snapshot was taken.
// Package kmsg reads it, and the records between two of them.
type KernelLogPosition struct {
	Source string `json:"source"`            // /dev/kmsg, or the file given with --kmsg
	BootID string `json:"boot_id,omitempty"` // the boot the log belongs to
	First  uint64 `json:"first_seq"`         // the oldest record the log still held
	// Next is the sequence number of the next record to come, the newest
	// record's plus one, or 0 for an empty log.
	Next uint64 `json:"next_seq"`
	// Unavailable says why the log could not be read, and the other fields are then empty.
	Unavailable string `json:"unavailable,omitempty"`
}

// Host holds the facts that place a snapshot in time and on a machine.
type Host struct {
	Hostname       string    `json:"hostname"`
	KernelRelease  string    `json:"kernel_release"`
	BootID         string    `json:"boot_id"`
	BootTime       time.Time `json:"boot_time"` // btime of <proc-root>/stat
	CaptureStart   time.Time `json:"capture_start"`
	CaptureEnd     time.Time `json:"capture_end"`
	GpusnapVersion string    `json:"gpusnap_version"`
	ProcRoot       string    `json:"proc_root"`
	// GPUNodes are the minor numbers (the N of /dev/nvidiaN) of the GPUs the
	// host showed without NVML, in its driver's /proc entries and in its
	// /dev where the proc root is the live procfs.
	GPUNodes []int `json:"gpu_nodes,omitempty"`
	// NVIDIADriver is DriverLoaded or DriverNotLoaded, as <proc-root>/devices
	// says, or "" where it could not be read. A check of every GPU on a host
	// where none was seen trusts only DriverNotLoaded to mean none is there.
	NVIDIADriver string `json:"nvidia_driver,omitempty"`
}

// Host.NVIDIADriver's values.
const (
	DriverLoaded    = "loaded"
	DriverNotLoaded = "not loaded"
)

// Scan counts what the /proc walk met. A vanished or refused process is not
// an error, as processes exit mid-scan and PID 1 refuses reads even to root.
type Scan struct {
	ProcessesRead int      `json:"processes_read"`
	Vanished      int      `json:"vanished"`
	VanishedPIDs  []int    `json:"vanished_pids,omitempty"`
	Refused       int      `json:"refused"`
	RefusedPIDs   []int    `json:"refused_pids,omitempty"`
	Errors        []string `json:"errors,omitempty"` // host-level files that could not be read
	// CapturePath is how the processes were read, "bpf" for BPF iterators with
	// /proc for command lines and cgroups, or "proc" for /proc alone. Empty in
	// snapshots taken before gpusnap had two.
	CapturePath string `json:"capture_path,omitempty"`
	// CaptureNote says how the iterators ran (pinned or loaded) on the BPF
	// path, and why the BPF path was not taken where it was wanted.
	CaptureNote string `json:"capture_note,omitempty"`
	// Unreadable counts the processes whose maps or fds could not be read
	// (Process.Unreadable), so what they map or hold is unknown.
	Unreadable int `json:"unreadable"`
	// Hidden are the PIDs the kernel still had whose /proc directory did
	// not read as the process (a mount over /proc/PID). What they map or
	// hold was not seen.
	Hidden []HiddenProcess `json:"hidden_processes,omitempty"`
	// Relists counts the listings of the proc root after the first. While
	// processes vanish before they are read, the root is listed again and
	// the new PIDs read (and the children of a vanished process's parent),
	// so a process that keeps forking and exiting is seen.
	Relists int `json:"relists,omitempty"`
	// Unsettled says why the relisting stopped while processes were still
	// vanishing unread (a bound was reached). A process that changes its PID
	// faster than the capture reads may have been missed. "" when the
	// listing settled.
	Unsettled string `json:"unsettled,omitempty"`
	// CodeRead says the capture read what code its processes run beside
	// their exe (Process.ForeignCode) where it looked, on the live /proc. A
	// process of such a snapshot without ForeignCode had its code not read,
	// so no exe allow entry vouches for it.
	CodeRead bool `json:"code_read,omitempty"`
}

// Partial reports whether some process's maps or fds could not be read.
func (s *Scan) Partial() bool { return s.Unreadable > 0 }

// Process is one process as /proc showed it.
type Process struct {
	PID       int       `json:"pid"`
	StartTime uint64    `json:"start_time"` // field 22 of /proc/PID/stat, in clock ticks since boot
	Started   time.Time `json:"started"`    // BootTime + StartTime/CLK_TCK
	PPID      int       `json:"ppid"`
	// PGID and Session are fields 5 and 6 of stat, the process group and
	// session, as the capturing procfs numbers them, read for a GPU user and
	// its ancestors (0 when not read). They tell a restarting loop from a
	// login session, and the group is what kill -- -PGID ends.
	PGID    int    `json:"pgid,omitempty"`
	Session int    `json:"session,omitempty"`
	Comm    string `json:"comm"`
	// State is the kernel's state letter, field 3 of /proc/PID/stat. It is R
	// running, S sleeping, D uninterruptible (disk) wait, Z zombie (exited,
	// not yet reaped by its parent), T stopped, t traced, X dead, I idle
	// kernel thread. Empty in snapshots taken before gpusnap kept it.
	State string `json:"state,omitempty"`
	// Threads is field 20 of stat, the threads of the process. A Z process
	// with more than one is alive, as its main thread exited and others run.
	Threads int `json:"threads,omitempty"`
	// LiveThread is the thread (TID) whose task directory was read for the
	// command line, exe, maps and fds, because the leader had exited (state
	// Z) while other threads ran. It is 0 when the process was read as usual.
	LiveThread int      `json:"live_thread,omitempty"`
	Cmdline    []string `json:"cmdline,omitempty"`
	// CmdlineCut names the whole command line when it was longer than
	// CmdlineLimit. Cmdline holds the arguments of its first CmdlineLimit bytes.
	CmdlineCut *Cut `json:"cmdline_cut,omitempty"`

	Exe        string `json:"exe,omitempty"`         // target of /proc/PID/exe, without " (deleted)"
	ExeDeleted bool   `json:"exe_deleted,omitempty"` // the target ended in " (deleted)"

	// ExeSHA256 is the SHA-256 of the file the process runs, read through
	// /proc/PID/exe (a deleted or memfd binary included), for a process that
	// uses a GPU on the live procfs. HashStatus says whether it was read
	// (HashOK, HashTooLarge, HashUnreadable), and Package who installed it.
	ExeSHA256  string   `json:"exe_sha256,omitempty"`
	HashStatus string   `json:"hash_status,omitempty"`
	Package    *Package `json:"package,omitempty"`
	// ForeignCode is what else it runs, as libraries no package installed,
	// the loader's variables and its mount namespace (for a process that
	// uses a GPU, on the live procfs).
	ForeignCode *ForeignCode `json:"foreign_code,omitempty"`

	UID  int    `json:"uid"`  // real uid, from the Uid line of status
	EUID int    `json:"euid"` // effective uid
	User string `json:"user,omitempty"`

	NSpid        []int  `json:"nspid,omitempty"`         // status NSpid, host PID first, innermost last
	PIDNamespace string `json:"pid_namespace,omitempty"` // target of /proc/PID/ns/pid, e.g. pid:[4026531836]

	Cgroups          []string `json:"cgroups,omitempty"` // lines of /proc/PID/cgroup
	ContainerID      string   `json:"container_id,omitempty"`
	ContainerRuntime string   `json:"container_runtime,omitempty"` // docker, containerd, cri-o
	PodUID           string   `json:"pod_uid,omitempty"`
	SlurmJobID       string   `json:"slurm_job_id,omitempty"`
	SystemdUnit      string   `json:"systemd_unit,omitempty"`
	// OwnerCgroups are what the capture read of the cgroup directories that
	// carry ContainerID, PodUID and SlurmJobID. The owner rule
	// (VerifiedOwner) vouches for an id only where no one but root could
	// write them. Nil in a snapshot that did not read them.
	OwnerCgroups []OwnerCgroup `json:"owner_cgroups,omitempty"`
	// UnitRestart is the Restart= of SystemdUnit's file (and drop-ins), and
	// UnitTimer the timer that starts it, for a process that uses a GPU.
	// They say what brings it back after a kill.
	UnitRestart string `json:"unit_restart,omitempty"`
	UnitTimer   string `json:"unit_timer,omitempty"`

	KernelThread bool `json:"kernel_thread,omitempty"`

	// Mappings are the device mappings, NVIDIA devices first, then every
	// other device. Past the first MappingsPerDevice lines of one device,
	// only a line with permissions not yet seen on it is kept, and the rest
	// are counted in MappingRuns.
	Mappings []Mapping `json:"mappings,omitempty"`
	// MappingRuns summarise, per device, the mapping lines not kept one by one.
	MappingRuns []MappingRun `json:"mapping_runs,omitempty"`
	// SuspectAnon are anonymous executable mappings of 64 MiB or more in a
	// process that also uses an NVIDIA device, as CUDA driver allocations look
	// like this. Past the first MappingsPerDevice, they are counted in a run
	// of MappingRuns of class anon_exec.
	SuspectAnon []Mapping `json:"suspect_anon_mappings,omitempty"`
	Holders     []Holder  `json:"holders,omitempty"`
	// HolderRuns summarise, per device node, the fds not kept one by one
	// (by the mappings' rule of 256 per node, then only a new access mode).
	// Its lines counts them and its perms holds their access modes.
	HolderRuns []MappingRun `json:"holder_runs,omitempty"`
	// DRMClients are its open DRM and accel files with their memory and
	// engine time, where a sys root was read (accel.go).
	DRMClients []DRMClient `json:"drm_clients,omitempty"`

	// Raw keeps the kernel's own text for processes that use an NVIDIA device,
	// so diffs and evidence bundles hold the kernel's words and not only our parse.
	Raw *Raw `json:"raw,omitempty"`

	// Sockets are the internet sockets of a process that uses a GPU (NVML
	// lists it, or it holds or maps an NVIDIA device), joined by inode to its
	// network namespace's tables. At most SocketsPerProcess are kept, the
	// rest counted in SocketsDropped. UnixSockets counts its unix sockets.
	Sockets        []Socket `json:"sockets,omitempty"`
	SocketsDropped int      `json:"sockets_dropped,omitempty"`
	UnixSockets    int      `json:"unix_sockets,omitempty"`

	// Ancestry, Reparented and Wchan place a GPU process (as Sockets) by its
	// parents up to PID 1 (at most MaxAncestry, nearest first), whether init
	// or a subreaper adopted it after its parent left, judged by its session,
	// and in D state the kernel function it waits in, since such a process
	// ignores kill -9.
	Ancestry   []Ancestor `json:"ancestry,omitempty"`
	Reparented bool       `json:"reparented,omitempty"`
	Wchan      string     `json:"wchan,omitempty"`

	// Unreadable names which of the files that show device use, "maps" and
	// "fd", could not be read (refused, or another error), so what the
	// process maps or holds is unknown.
	Unreadable []string `json:"unreadable,omitempty"`

	// Errors names what could not be read for this process (`exe: permission denied`).
	Errors []string `json:"errors,omitempty"`
}

// Raw is the unparsed text of a process's files as captured, each at most
// TextLimit bytes, the whole of a longer one named in Cuts.
type Raw struct {
	Maps    string `json:"maps"`
	Status  string `json:"status,omitempty"`
	Cmdline string `json:"cmdline,omitempty"` // NUL-separated, as the kernel gives it
	Cgroup  string `json:"cgroup,omitempty"`
	// Cuts names each text above that was cut ("maps", "status", "cmdline", "cgroup").
	Cuts map[string]Cut `json:"cuts,omitempty"`
}

// TextLimit is the most of any one raw kernel text of a process that a
// snapshot keeps, and CmdlineLimit of its command line, kept parsed and raw
// for a GPU process. A process then costs at most 64 KiB of new store data,
// so a tenant's 5 MB of arguments in a hundred forks cannot cost gigabytes.
const (
	TextLimit    = 64 << 10
	CmdlineLimit = 32 << 10
)

// Cut names a text longer than its limit (TextLimit, CmdlineLimit), of which
// the first bytes up to the limit were kept.
type Cut struct {
	Length int64  `json:"length"` // bytes in the whole text
	SHA256 string `json:"sha256"` // of the whole text
	// Partial says the text went on past maxFileSize (64 MiB), where reading
	// stopped. Length and SHA256 are of its first 64 MiB.
	Partial bool `json:"partial,omitempty"`
}

// MappingsPerDevice is how many maps lines of one device a snapshot keeps one
// by one. MappingRun counts the rest.
const MappingsPerDevice = 256

// MappingRun summarises the maps lines of one device that were not kept,
// since a tenant can map a device 100,000 times.
type MappingRun struct {
	Path     string   `json:"path"` // "" for the lines of devices past the last run kept
	Class    string   `json:"class"`
	GPUMinor *int     `json:"gpu_minor,omitempty"`
	Lines    int      `json:"lines"` // lines not kept
	Bytes    uint64   `json:"bytes"` // the size they map
	Perms    []string `json:"perms"` // every permission set among them, each also kept in Mappings
}

// Device classes of mappings and holders.
const (
	ClassNVIDIA   = "nvidia"    // an NVIDIA device (docs/spec.md, Device rule)
	ClassOther    = "other"     // every other device
	ClassAnonExec = "anon_exec" // a suspect anonymous executable mapping
)

// Mapping is one line of /proc/PID/maps that maps a device (or, in
// SuspectAnon, an anonymous executable region).
type Mapping struct {
	Address string `json:"address"` // the kernel's range text, e.g. 7f0000000000-7f0000200000
	Start   uint64 `json:"start"`
	End     uint64 `json:"end"`
	Size    uint64 `json:"size"`
	Perms   string `json:"perms"` // rwxs / rwxp as in maps
	Offset  uint64 `json:"offset"`
	Dev     string `json:"dev"` // the maps dev field, the filesystem holding the node, not the device
	Inode   uint64 `json:"inode"`
	Path    string `json:"path,omitempty"` // without " (deleted)"
	Deleted bool   `json:"deleted,omitempty"`
	// DeviceNumber is the device's own major:minor, from stat of map_files (root only).
	DeviceNumber DeviceNumber `json:"device_number,omitzero"`
	DeviceType   string       `json:"device_type,omitempty"` // char or block, where DeviceNumber is known
	Class        string       `json:"class"`
	// GPUMinor is N of /dev/nvidiaN (or the minor of a 195 device below 255), the GPU with NVML minor number N.
	GPUMinor *int `json:"gpu_minor,omitempty"`
}

// Writable reports whether the mapping can be written through.
func (m Mapping) Writable() bool { return len(m.Perms) > 1 && m.Perms[1] == 'w' }

// Line renders the mapping as a maps line, for evidence.
func (m Mapping) Line() string {
	path := m.Path
	if m.Deleted {
		path += " (deleted)"
	}
	return fmt.Sprintf("%s %s %08x %s %d %s", m.Address, m.Perms, m.Offset, m.Dev, m.Inode, path)
}

// Holder is an open file descriptor on a device, as fuser -v shows it.
type Holder struct {
	FD           int          `json:"fd"`
	Target       string       `json:"target"` // link target of /proc/PID/fd/FD, without " (deleted)"
	Deleted      bool         `json:"deleted,omitempty"`
	Access       string       `json:"access,omitempty"` // r, w or rw, from the flags of /proc/PID/fdinfo/FD
	Flags        string       `json:"flags,omitempty"`  // the octal flags field of fdinfo
	DeviceNumber DeviceNumber `json:"device_number,omitzero"`
	DeviceType   string       `json:"device_type,omitempty"`
	Class        string       `json:"class"`
	GPUMinor     *int         `json:"gpu_minor,omitempty"`
	// TID is the thread whose own fd table holds the fd, for a thread cloned
	// without CLONE_FILES, as /proc/PID/fd shows the leader's table only. It
	// is 0 for the process's table.
	TID int `json:"tid,omitempty"`
	// RingSlot is set for a file registered with the io_uring open as FD
	// (IORING_REGISTER_FILES), the slot of the ring's table that holds it.
	// Such a file has no fd of its own. Its Access is the most it can be
	// (rw), the ring showing none, and its class comes from its path alone.
	RingSlot *int `json:"ring_slot,omitempty"`
}

// Writable reports whether the descriptor was opened for writing.
func (h Holder) Writable() bool { return h.Access == "w" || h.Access == "rw" }

// Key is the process identity PID@START (ProcessKey), so a reused PID is a new process.
func (p *Process) Key() string { return ProcessKey(p.PID, p.StartTime) }

// Defunct reports whether the process has exited, as an unreaped zombie (Z)
// or a dead task (X). It runs no code and holds nothing, so it keeps no GPU
// context of its own, though NVML may list its PID while the driver tears the
// context down. A zombie leader whose other threads still run (Threads > 1)
// is alive.
func (p *Process) Defunct() bool {
	return p.State == "X" || (p.State == "Z" && p.Threads <= 1)
}

// UsesNVIDIA reports whether the process maps or holds an NVIDIA device.
func (p *Process) UsesNVIDIA() bool {
	for _, m := range p.Mappings {
		if m.Class == ClassNVIDIA {
			return true
		}
	}
	for _, h := range p.Holders {
		if h.Class == ClassNVIDIA {
			return true
		}
	}
	return false
}

// NVML is NVML's view of the host at capture time.
type NVML struct {
	Source string `json:"source"` // library, fixture:PATH, or disabled
	// Unavailable says why NVML could not be read at all ("library not found"), empty when it was.
	Unavailable       string `json:"unavailable,omitempty"`
	DriverVersion     string `json:"driver_version,omitempty"`
	NVMLVersion       string `json:"nvml_version,omitempty"`
	CUDADriverVersion int    `json:"cuda_driver_version,omitempty"`
	Devices           []GPU  `json:"devices,omitempty"`
	// Missing records, per value NVML could not give, why (`"devices[0].memory.reserved": "not supported"`).
	Missing map[string]string `json:"missing,omitempty"`
}

// GPU is one physical GPU.
type GPU struct {
	Index              int                  `json:"index"`
	UUID               string               `json:"uuid"`
	Name               string               `json:"name,omitempty"`
	MinorNumber        *int                 `json:"minor_number,omitempty"`
	PCIBusID           string               `json:"pci_bus_id,omitempty"`
	Memory             *Memory              `json:"memory,omitempty"`
	ComputeProcesses   []GPUProcess         `json:"compute_processes,omitempty"`
	GraphicsProcesses  []GPUProcess         `json:"graphics_processes,omitempty"`
	MPSProcesses       []GPUProcess         `json:"mps_processes,omitempty"`
	ProcessUtilization []ProcessUtilization `json:"process_utilization,omitempty"`
	// Utilization is the GPU's own busy figures (nvmlDeviceGetUtilizationRates).
	Utilization *Utilization `json:"utilization,omitempty"`
	MIGMode     *int         `json:"mig_mode,omitempty"` // current mode, 1 enabled, 0 disabled
	MIGDevices  []MIGDevice  `json:"mig_devices,omitempty"`
	// AccountingMode is NVML's accounting mode, "enabled" or "disabled"
	// (nvidia-smi -am 1 turns it on, as root), empty where it was not read.
	AccountingMode string `json:"accounting_mode,omitempty"`
	// Accounting is the driver's record of each process that ran on the GPU
	// while accounting was on, exited ones included (nvmlDeviceGetAccountingPids
	// and nvmlDeviceGetAccountingStats), by PID.
	Accounting []AccountingStats `json:"accounting,omitempty"`
}

// The accounting modes of GPU.AccountingMode.
const (
	AccountingEnabled  = "enabled"
	AccountingDisabled = "disabled"
)

// AccountingStats is NVML's accounting record of one process on a GPU
// (nvmlAccountingStats_t). A figure NVML marks not available is nil.
type AccountingStats struct {
	PID int `json:"pid"`
	// GPUUtilization and MemoryUtilization are percentages of the time the
	// GPU's kernels, and its memory, were busy over the process's life.
	GPUUtilization    *uint32 `json:"gpu_utilization,omitempty"`
	MemoryUtilization *uint32 `json:"memory_utilization,omitempty"`
	MaxMemoryUsage    *uint64 `json:"max_memory_usage,omitempty"` // bytes
	Time              uint64  `json:"time"`                       // milliseconds the process ran (so far, while running)
	StartTime         uint64  `json:"start_time"`                 // microseconds since the Unix epoch
	IsRunning         bool    `json:"is_running"`
}

// Memory is framebuffer memory in bytes. Reserved is nil where the driver
// lacks the v2 memory call.
type Memory struct {
	Total    uint64  `json:"total"`
	Reserved *uint64 `json:"reserved,omitempty"`
	Used     uint64  `json:"used"`
	Free     uint64  `json:"free"`
}

// GPUProcess is a process NVML lists on a GPU or MIG instance. PIDs are host PIDs.
type GPUProcess struct {
	PID int `json:"pid"`
	// UsedGPUMemory is nil when NVML reports it as not available.
	UsedGPUMemory     *uint64 `json:"used_gpu_memory,omitempty"`
	GPUInstanceID     *uint32 `json:"gpu_instance_id,omitempty"`
	ComputeInstanceID *uint32 `json:"compute_instance_id,omitempty"`
}

// Utilization is the percentage of the last sample period (about a second)
// in which a kernel ran on the GPU, and in which its memory was read or
// written (nvmlUtilization_t).
type Utilization struct {
	GPU    uint32 `json:"gpu"`
	Memory uint32 `json:"memory"`
}

// ProcessUtilization is one per-process utilization sample, in percent.
type ProcessUtilization struct {
	PID       int    `json:"pid"`
	SMUtil    uint32 `json:"sm_util"`
	MemUtil   uint32 `json:"mem_util"`
	EncUtil   uint32 `json:"enc_util,omitempty"`
	DecUtil   uint32 `json:"dec_util,omitempty"`
	Timestamp uint64 `json:"timestamp,omitempty"` // microseconds, NVML's clock
}

// ProcessList is one of NVML's process lists of a GPU or MIG device, with the
// kind letter ProcessMerge records, the JSON field (the key of its Missing
// entry) and the processes.
type ProcessList struct {
	Kind, Field string
	Processes   []GPUProcess
}

// ProcessLists are the GPU's compute, graphics and MPS lists. Every reader
// of who NVML lists walks these, so a list added is seen by all of them.
func (g *GPU) ProcessLists() []ProcessList {
	return processLists(g.ComputeProcesses, g.GraphicsProcesses, g.MPSProcesses)
}

// ProcessLists are the MIG device's lists, as GPU.ProcessLists.
func (m *MIGDevice) ProcessLists() []ProcessList {
	return processLists(m.ComputeProcesses, m.GraphicsProcesses, m.MPSProcesses)
}

func processLists(compute, graphics, mps []GPUProcess) []ProcessList {
	return []ProcessList{{"C", "compute_processes", compute}, {"G", "graphics_processes", graphics}, {"M", "mps_processes", mps}}
}

// MIGDevice is one MIG instance of a GPU.
type MIGDevice struct {
	GPUInstanceID     int          `json:"gpu_instance_id"`
	ComputeInstanceID int          `json:"compute_instance_id"`
	UUID              string       `json:"uuid,omitempty"`
	Memory            *Memory      `json:"memory,omitempty"`
	ComputeProcesses  []GPUProcess `json:"compute_processes,omitempty"`
	GraphicsProcesses []GPUProcess `json:"graphics_processes,omitempty"`
	MPSProcesses      []GPUProcess `json:"mps_processes,omitempty"`
	// Utilization is the instance's busy figures, where NVML gives them
	// (today's drivers answer not supported for a MIG device).
	Utilization *Utilization `json:"utilization,omitempty"`
}

// NewID returns a snapshot id that sorts by time, UTC to the microsecond, then
// random hex so two hosts or two captures in one microsecond never collide.
func NewID(t time.Time) string {
	var b [3]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return t.UTC().Format("20060102-150405.000000") + "-" + hex.EncodeToString(b[:])
}
