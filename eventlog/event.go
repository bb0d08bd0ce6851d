// Package eventlog is the store's event log of what gpusnap watch saw
// between snapshots (opens and mappings of NVIDIA devices, the lives of the
// processes that made them, its own starts and stops). It is kept in a
// journal beside the store file (docs/watch.md), and read by events, diff
// and bundle.
package eventlog

import (
	"fmt"
	"time"

	"github.com/gpusnap/gpusnap/snapshot"
)

// Kinds of event.
const (
	KindOpen = "open" // a process opened an NVIDIA device
	KindMmap = "mmap" // a process mapped an NVIDIA device
	KindExec = "exec" // a process that used (or goes on to use) a device exec'd
	KindFork = "fork" // a process that used a device forked, and the child inherits its descriptors and mappings
	// KindInherit is a use of a device by a device user's child, from its
	// fork on. Process is the child, and Device what its parent opened or
	// mapped (nil where watch did not see which). A process that keeps
	// forking and exiting leaves one at every hop.
	KindInherit = "inherit"
	KindExit    = "exit"  // a process that used a device ended
	KindUsing   = "using" // a rescan in fallback mode found a process holding or mapping a device
	KindNVML    = "nvml"  // NVML listed a process on a GPU it had not listed before
	// KindGPUEvent is an event NVML delivered for a GPU, a critical Xid, an
	// ECC error, or the GPU lost (GPUEvent says which).
	KindGPUEvent = "gpu_event"

	// The watch's own record says when it ran, how, and what it missed.
	KindWatchStart = "watch_start"
	KindWatchStop  = "watch_stop"
	KindLost       = "lost"  // the kernel dropped events (the ring buffer was full), or, with source nvml, NVML's GPU events were not read
	KindAlive      = "alive" // a running watch's heartbeat (AliveEvery)

	// ModeFallback is a watch_start's mode where no kernel hook loads. It
	// rescans /proc each interval, which misses what comes and goes between.
	ModeFallback = "fallback"
)

// The types of a gpu_event say what NVML's event set delivered.
const (
	GPUEventXid          = "xid"            // a critical Xid, whose number Xid holds
	GPUEventECCDoubleBit = "ecc_double_bit" // an uncorrectable ECC error
	GPUEventECCSingleBit = "ecc_single_bit" // a corrected ECC error
	GPUEventGPULost      = "gpu_lost"       // the wait answered GPU_IS_LOST, after which no GPU's events can be trusted
)

// AliveEvery is how often a running watch writes a record even when nothing
// happens. A watch killed by SIGKILL, the OOM killer or a crash writes no
// stop record, so a silence of more than twice this is read as a gap
// (Cover), never as a quiet window.
const AliveEvery = 30 * time.Second

// Sources of events.
const (
	SourceLSM           = "lsm"
	SourceFentry        = "fentry"
	SourceKprobe        = "kprobe"
	SourceTracepoint    = "tracepoint"
	SourceProcConnector = "proc-connector"
	SourceRescan        = "rescan"
	SourceNVML          = "nvml"
)

// Event is one record of the event log.
type Event struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Source  string    `json:"source,omitempty"`
	Process *Process  `json:"process,omitempty"`
	Device  *Device   `json:"device,omitempty"`

	Access   string   `json:"access,omitempty"` // an open's r, w or rw
	Perms    string   `json:"perms,omitempty"`  // an mmap's protection, as maps prints it (rw-s)
	Length   uint64   `json:"length,omitempty"` // the bytes an mmap asked for, where the hook has them
	FD       *int     `json:"fd,omitempty"`
	Child    *Process `json:"child,omitempty"`     // fork
	ExitCode *int     `json:"exit_code,omitempty"` // an exit's wait status
	GPUUUID  string   `json:"gpu_uuid,omitempty"`  // nvml, gpu_event

	// A gpu_event has its type (GPUEventXid ...), the Xid number, and the
	// MIG instance it is of (nil for the whole GPU).
	GPUEvent          string  `json:"gpu_event,omitempty"`
	Xid               uint64  `json:"xid,omitempty"`
	GPUInstanceID     *uint32 `json:"gpu_instance_id,omitempty"`
	ComputeInstanceID *uint32 `json:"compute_instance_id,omitempty"`

	// Mode and Blind are a watch_start's mode (a hook name, or fallback)
	// and what it cannot see.
	Mode  string   `json:"mode,omitempty"`
	Blind []string `json:"blind,omitempty"`
	// Lost counts, in lost and watch_stop records, the events the kernel
	// dropped since the watch started.
	Lost uint64 `json:"lost,omitempty"`
	Note string `json:"note,omitempty"`
	// GPUEventsOff says, in alive and watch_stop records, why NVML's GPU
	// events were not being read then (a GPU lost, a failing wait). It is
	// said again in every heartbeat so that a later window knows it too, and
	// is empty while they are read.
	GPUEventsOff string `json:"gpu_events_off,omitempty"`

	// Count is how many like events this record stands for, where watch
	// coalesced repeats (the same process, kind, device and access or
	// protection) into one. Time is the first of them, and Last the last.
	// Absent, the record is one event.
	Count uint64    `json:"count,omitempty"`
	Last  time.Time `json:"last,omitzero"`
	// Lineage is the PID@START of the device user that a fork, inherit or
	// exit record's process descends from. Watch coalesces those records by
	// lineage, so a process that hops PIDs by forking and exiting grows the
	// log with time, not with its hops. First is then the process of the
	// first record coalesced, Process that of the last.
	Lineage string   `json:"lineage,omitempty"`
	First   *Process `json:"first,omitempty"`

	// Util is a util record's samples.
	Util *Util `json:"util,omitempty"`

	// Seq is the record's place in its watch's records, from 1 (its
	// watch_start). The journal writes it, with the hash that chains the
	// record into its segment (docs/watch.md). It is absent in logs written
	// before the chain, which read as unchained.
	Seq uint64 `json:"seq,omitempty"`
}

// Process is who made an event, as the kernel saw it at the event.
type Process struct {
	PID        int    `json:"pid"`
	StartTime  uint64 `json:"start_time"`       // /proc/PID/stat field 22, clock ticks since boot
	NSPID      int    `json:"ns_pid,omitempty"` // the PID in its own pid namespace, where that differs
	PPID       int    `json:"ppid,omitempty"`
	Comm       string `json:"comm,omitempty"`
	Exe        string `json:"exe,omitempty"`
	ExeDeleted bool   `json:"exe_deleted,omitempty"`
	UID        int    `json:"uid"`
	Cgroup     string `json:"cgroup,omitempty"`
	CgroupID   uint64 `json:"cgroup_id,omitempty"`

	ContainerID string `json:"container_id,omitempty"`
	PodUID      string `json:"pod_uid,omitempty"`
	SlurmJobID  string `json:"slurm_job_id,omitempty"`
	// OwnerCgroups are what watch read of the cgroup directories that carry
	// those ids, as a snapshot's processes have them. They are nil in a
	// record of a watch that did not read them.
	OwnerCgroups []snapshot.OwnerCgroup `json:"owner_cgroups,omitempty"`
}

// VerifiedOwner returns the id of kind (snapshot.OwnerSlurmJob, OwnerPod,
// OwnerContainer) the record names, where the owner rule vouches for it
// (snapshot.OwnerDoubt), else "".
func (p *Process) VerifiedOwner(kind string) string {
	id := map[string]string{snapshot.OwnerSlurmJob: p.SlurmJobID, snapshot.OwnerPod: p.PodUID, snapshot.OwnerContainer: p.ContainerID}[kind]
	if id == "" || snapshot.OwnerDoubt(kind, p.OwnerCgroups, []string{p.Cgroup}) != "" {
		return ""
	}
	return id
}

// Key is the process's identity, PID@STARTTIME, as snapshots have it.
func (p *Process) Key() string { return fmt.Sprintf("%d@%d", p.PID, p.StartTime) }

// Device is the device an open or mapping was of.
type Device struct {
	Path   string `json:"path"`
	Number string `json:"number,omitempty"` // major:minor, the device's own number
	Type   string `json:"type,omitempty"`   // char or block
	Class  string `json:"class"`            // as the snapshot classifier decides, such as nvidia
	GPU    *int   `json:"gpu_minor,omitempty"`
}

// Writable reports whether the event gave write access to a device, by an
// open for writing or a writable mapping.
func (e *Event) Writable() bool {
	switch e.Kind {
	case KindOpen, KindUsing, KindInherit:
		return e.Access == "w" || e.Access == "rw" || len(e.Perms) > 1 && e.Perms[1] == 'w'
	case KindMmap:
		return len(e.Perms) > 1 && e.Perms[1] == 'w'
	}
	return false
}

// GPUEventText says a gpu_event in words, as in "Xid 79 on GPU-... (MIG GPU
// instance 1, compute instance 0)".
func (e *Event) GPUEventText() string {
	var what string
	switch e.GPUEvent {
	case GPUEventXid:
		what = fmt.Sprintf("Xid %d", e.Xid)
	case GPUEventECCDoubleBit:
		what = "double-bit (uncorrectable) ECC error"
	case GPUEventECCSingleBit:
		what = "single-bit (corrected) ECC error"
	case GPUEventGPULost:
		what = "GPU lost"
	default:
		what = "GPU event " + e.GPUEvent
	}
	gpu := e.GPUUUID
	if gpu == "" {
		gpu = "a GPU NVML did not name"
	}
	what += " on " + gpu
	if e.GPUInstanceID != nil {
		what += fmt.Sprintf(" (MIG GPU instance %d", *e.GPUInstanceID)
		if e.ComputeInstanceID != nil {
			what += fmt.Sprintf(", compute instance %d", *e.ComputeInstanceID)
		}
		what += ")"
	}
	return what
}

// UsesDevice reports whether the event is a use of a device.
func (e *Event) UsesDevice() bool {
	return e.Kind == KindOpen || e.Kind == KindMmap || e.Kind == KindUsing || e.Kind == KindNVML || e.Kind == KindInherit
}
