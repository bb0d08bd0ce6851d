package snapshot

import (
	"slices"
	"sort"
	"strings"
)

// GPUUse is one GPU as NVML and /proc see it together: what NVML lists,
// which live process each listed PID is, who else holds or maps the GPU's
// /dev/nvidiaN, and the memory no listed process accounts for.
type GPUUse struct {
	Index       int     `json:"index"`
	UUID        string  `json:"uuid"`
	Name        string  `json:"name,omitempty"`
	MinorNumber *int    `json:"minor_number,omitempty"`
	Memory      *Memory `json:"memory,omitempty"`
	// Processes are the PIDs NVML lists on the GPU or any of its MIG devices, once each.
	Processes []GPUProcessUse `json:"processes,omitempty"`
	// Unlisted hold or map the GPU's /dev/nvidiaN but are not listed by NVML.
	Unlisted []DeviceUser `json:"unlisted,omitempty"`
	// Unaccounted is the memory no live process accounts for (see
	// Unaccounted). It is nil when that cannot be told (no memory, a list
	// NVML refused, a live process whose memory is not available).
	Unaccounted *uint64  `json:"unaccounted,omitempty"`
	MIG         []MIGUse `json:"mig,omitempty"`
	// AccountingMode is GPU.AccountingMode. Where it is "disabled", a process
	// that uses the GPU and exits between two snapshots leaves no NVML record.
	AccountingMode string `json:"accounting_mode,omitempty"`
}

// MIGUse is one MIG device with its memory, its processes and what they leave unaccounted.
type MIGUse struct {
	GPUInstanceID     int             `json:"gpu_instance_id"`
	ComputeInstanceID int             `json:"compute_instance_id"`
	UUID              string          `json:"uuid,omitempty"`
	Memory            *Memory         `json:"memory,omitempty"`
	Processes         []GPUProcessUse `json:"processes,omitempty"`
	Unaccounted       *uint64         `json:"unaccounted,omitempty"`
}

// How a listed PID was matched to a process of the snapshot.
const (
	JoinPID       = "pid"       // a process with that host PID
	JoinNSpid     = "nspid"     // the only process with that PID further down its NSpid chain
	JoinAmbiguous = "ambiguous" // several processes have that namespaced PID, and none is chosen
	JoinNone      = ""          // no live process, an orphan
	// JoinDefunct says only a defunct process (a zombie, exited and not
	// reaped) has that PID. No live process does, so it is an orphan.
	// Process is the zombie.
	JoinDefunct = "defunct"
)

// GPUProcessUse is a PID NVML lists, joined to its /proc process.
type GPUProcessUse struct {
	PID int `json:"pid"` // as NVML gave it, a host PID
	// Types are the lists it is in, C (compute), G (graphics), M (MPS client).
	Types string `json:"types"`
	// UsedGPUMemory is the most any list reports for it (a C+G process is
	// reported in both). It is nil when NVML has it as not available.
	UsedGPUMemory     *uint64             `json:"used_gpu_memory,omitempty"`
	GPUInstanceID     *uint32             `json:"gpu_instance_id,omitempty"`
	ComputeInstanceID *uint32             `json:"compute_instance_id,omitempty"`
	Utilization       *ProcessUtilization `json:"utilization,omitempty"`
	Process           *Process            `json:"-"` // the live process, or the zombie for JoinDefunct
	Join              string              `json:"join,omitempty"`
}

// DeviceUser is a process holding or mapping a GPU's device node.
type DeviceUser struct {
	Process  *Process  `json:"-"`
	PID      int       `json:"pid"`
	Holders  []Holder  `json:"holders,omitempty"`
	Mappings []Mapping `json:"mappings,omitempty"`
}

// GPUUsage joins NVML's GPUs with the snapshot's processes. It works on any
// Snapshot. One without NVML gives nil, and one without processes gives
// every listed PID as an orphan.
func GPUUsage(s *Snapshot) []GPUUse {
	if len(s.NVML.Devices) == 0 {
		return nil
	}
	j := newJoiner(s)
	out := make([]GPUUse, 0, len(s.NVML.Devices))
	for i := range s.NVML.Devices {
		out = append(out, j.gpu(&s.NVML.Devices[i], DeviceKey(i)))
	}
	return out
}

type joiner struct {
	s    *Snapshot
	pids *PIDJoin
	// byMinor maps a GPU minor number to the live processes holding or mapping its node.
	byMinor map[int][]*Process
}

func newJoiner(s *Snapshot) *joiner {
	j := &joiner{s: s, pids: NewPIDJoin(s.Processes), byMinor: map[int][]*Process{}}
	for k := range s.Processes {
		p := &s.Processes[k]
		if p.Defunct() {
			continue // it uses no GPU
		}
		for _, minor := range GPUMinors(p) {
			j.byMinor[minor] = append(j.byMinor[minor], p)
		}
	}
	return j
}

// PIDJoin tells which process of a snapshot a PID NVML lists is
// (docs/spec.md, Process identity). gpusnap ps and diff both join through it,
// so they never disagree on whether a PID is an orphan.
type PIDJoin struct {
	// hostView says the proc root shows kernel threads, which only a procfs
	// of the host's pid namespace does. Its PIDs are the host PIDs NVML
	// gives, so a PID not among them is an orphan, never a namespaced PID of
	// some container process that happens to have the same number.
	hostView bool
	byPID    map[int]*Process
	// nsPIDs maps a PID in a namespace below the host's to the live processes
	// that have it there and hold or map an NVIDIA device, as a process with
	// a GPU context does.
	nsPIDs map[int][]*Process
}

// NewPIDJoin indexes procs for Process.
func NewPIDJoin(procs []Process) *PIDJoin {
	j := &PIDJoin{byPID: make(map[int]*Process, len(procs)), nsPIDs: map[int][]*Process{}}
	for k := range procs {
		p := &procs[k]
		j.byPID[p.PID] = p
		j.hostView = j.hostView || p.KernelThread
		if p.Defunct() || len(p.NSpid) < 2 || !p.UsesNVIDIA() {
			continue
		}
		for _, ns := range p.NSpid[1:] {
			if ns != p.PID {
				j.nsPIDs[ns] = append(j.nsPIDs[ns], p)
			}
		}
	}
	return j
}

// Process finds the live process NVML means by pid. That is the process
// with that host PID, else, where the proc root is not the host's, the only
// process that has pid further down its NSpid chain and uses an NVIDIA
// device, else a zombie with that PID, or none. The string says which
// (JoinPID ...).
func (j *PIDJoin) Process(pid int) (*Process, string) {
	p := j.byPID[pid]
	if p != nil && !p.Defunct() {
		return p, JoinPID
	}
	if !j.hostView {
		switch c := j.nsPIDs[pid]; len(c) {
		case 0:
		case 1:
			return c[0], JoinNSpid
		default:
			return nil, JoinAmbiguous
		}
	}
	if p != nil {
		return p, JoinDefunct
	}
	return nil, JoinNone
}

// HostPID is the host PID of the live process NVML means by pid (Process),
// or pid itself when no live process is it.
func (j *PIDJoin) HostPID(pid int) int {
	if p, how := j.Process(pid); how == JoinNSpid {
		return p.PID
	}
	return pid
}

func (j *joiner) gpu(g *GPU, path string) GPUUse {
	u := GPUUse{Index: g.Index, UUID: g.UUID, Name: g.Name, MinorNumber: g.MinorNumber, Memory: g.Memory, AccountingMode: g.AccountingMode}
	var m ProcessMerge
	known := j.addLists(&m, path, g.ProcessLists())
	for k := range g.MIGDevices {
		mu := j.mig(&g.MIGDevices[k], MIGKey(path, k))
		u.MIG = append(u.MIG, mu)
		for _, p := range mu.Processes {
			m.Merge(p)
		}
	}
	u.Processes = j.joined(m.Uses(), g.ProcessUtilization)
	if known {
		u.Unaccounted = Unaccounted(g.Memory, u.Processes)
	}
	if g.MinorNumber != nil {
		u.Unlisted = j.unlisted(*g.MinorNumber, u.Processes)
	}
	return u
}

func (j *joiner) mig(m *MIGDevice, path string) MIGUse {
	u := MIGUse{GPUInstanceID: m.GPUInstanceID, ComputeInstanceID: m.ComputeInstanceID, UUID: m.UUID, Memory: m.Memory}
	var pm ProcessMerge
	known := j.addLists(&pm, path, m.ProcessLists())
	u.Processes = j.joined(pm.Uses(), nil)
	if known {
		u.Unaccounted = Unaccounted(m.Memory, u.Processes)
	}
	return u
}

// addLists merges the lists into m and reports whether NVML gave all of
// them (an empty list is a list).
func (j *joiner) addLists(m *ProcessMerge, path string, lists []ProcessList) bool {
	all := true
	for _, l := range lists {
		m.Add(l.Kind, l.Processes)
		if _, failed := j.s.NVML.Missing[path+"."+l.Field]; failed {
			all = false
		}
	}
	return all
}

// ProcessMerge merges NVML's process lists on one GPU, MIG device or memory
// pool into one use per PID, in first-met order, with the larger figure
// winning. A process listed as compute and graphics, or on a GPU and its MIG
// device, holds one allocation, not two. gpusnap ps and diff both merge
// through it, and the zero value is ready.
type ProcessMerge struct {
	order []int
	by    map[int]*GPUProcessUse
}

// Add merges one of NVML's lists, whose letter in Types (C, G or M) is kind.
func (m *ProcessMerge) Add(kind string, list []GPUProcess) {
	for _, p := range list {
		m.Merge(GPUProcessUse{PID: p.PID, Types: kind, UsedGPUMemory: p.UsedGPUMemory,
			GPUInstanceID: p.GPUInstanceID, ComputeInstanceID: p.ComputeInstanceID})
	}
}

// Merge merges one use already merged elsewhere (a MIG device's, into its GPU's).
func (m *ProcessMerge) Merge(p GPUProcessUse) {
	if m.by == nil {
		m.by = map[int]*GPUProcessUse{}
	}
	u := m.by[p.PID]
	if u == nil {
		u = &GPUProcessUse{PID: p.PID}
		m.by[p.PID] = u
		m.order = append(m.order, p.PID)
	}
	for _, t := range strings.Split(p.Types, "+") {
		if !slices.Contains(strings.Split(u.Types, "+"), t) {
			if u.Types != "" {
				u.Types += "+"
			}
			u.Types += t
		}
	}
	if p.UsedGPUMemory != nil && (u.UsedGPUMemory == nil || *p.UsedGPUMemory > *u.UsedGPUMemory) {
		u.UsedGPUMemory = p.UsedGPUMemory
	}
	if u.GPUInstanceID == nil {
		u.GPUInstanceID, u.ComputeInstanceID = p.GPUInstanceID, p.ComputeInstanceID
	}
}

// Uses are the merged uses, one per PID, not yet joined to processes.
func (m *ProcessMerge) Uses() []GPUProcessUse {
	if len(m.order) == 0 {
		return nil
	}
	out := make([]GPUProcessUse, 0, len(m.order))
	for _, pid := range m.order {
		out = append(out, *m.by[pid])
	}
	return out
}

// joined joins each use to its process and utilization sample.
func (j *joiner) joined(uses []GPUProcessUse, util []ProcessUtilization) []GPUProcessUse {
	for k := range uses {
		u := &uses[k]
		u.Process, u.Join = j.pids.Process(u.PID)
		for i := range util {
			if util[i].PID == u.PID {
				u.Utilization = &util[i]
				break
			}
		}
	}
	return uses
}

// Unaccounted is the memory of a GPU or MIG device that no live process
// accounts for, so a ghost's counts. It is used memory less the live PIDs'
// Credits and DriverOwn, floored at zero (NVML's figures can sum past it),
// and nil without a memory figure or a live process's. ps, check, the
// metrics and diff agree.
func Unaccounted(m *Memory, uses []GPUProcessUse) *uint64 {
	if m == nil {
		return nil
	}
	sum := DriverOwn(m)
	for i, c := range Credits(uses) {
		if j := uses[i].Join; j == JoinNone || j == JoinDefunct {
			continue
		}
		if c == nil {
			return nil
		}
		sum += *c
	}
	left := uint64(0)
	if m.Used > sum {
		left = m.Used - sum
	}
	return &left
}

// DriverOwn is the part of m's used memory the driver keeps for itself, its
// reserve, where used counts it. NVML's v1 figure does (total = used +
// free) and v2's does not (total = reserved + used + free). So a v2 figure
// keeps all of used, and a dead context smaller than the reserve still
// shows.
func DriverOwn(m *Memory) uint64 {
	if m == nil || m.Reserved == nil || m.Used+m.Free != m.Total {
		return 0
	}
	return min(*m.Reserved, m.Used)
}

// unlisted are the processes holding or mapping /dev/nvidia<minor> that no
// listed PID resolved to, in PID order.
func (j *joiner) unlisted(minor int, uses []GPUProcessUse) []DeviceUser {
	listed := map[*Process]bool{}
	for _, u := range uses {
		if u.Process != nil {
			listed[u.Process] = true
		}
	}
	var out []DeviceUser
	for _, p := range j.byMinor[minor] {
		if listed[p] {
			continue
		}
		du := DeviceUser{Process: p, PID: p.PID}
		for _, h := range p.Holders {
			if h.Class == ClassNVIDIA && h.GPUMinor != nil && *h.GPUMinor == minor {
				du.Holders = append(du.Holders, h)
			}
		}
		for _, m := range p.Mappings {
			if m.Class == ClassNVIDIA && m.GPUMinor != nil && *m.GPUMinor == minor {
				du.Mappings = append(du.Mappings, m)
			}
		}
		if du.Holders != nil || du.Mappings != nil {
			out = append(out, du)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].PID < out[b].PID })
	return out
}

// GPUMinors are the GPUs whose /dev/nvidiaN p holds or maps, each once.
func GPUMinors(p *Process) []int {
	var out []int
	add := func(m *int) {
		if m != nil && !slices.Contains(out, *m) {
			out = append(out, *m)
		}
	}
	for _, h := range p.Holders {
		if h.Class == ClassNVIDIA {
			add(h.GPUMinor)
		}
	}
	for _, m := range p.Mappings {
		if m.Class == ClassNVIDIA {
			add(m.GPUMinor)
		}
	}
	return out
}
