package diff

import (
	"fmt"
	"strconv"

	"github.com/gpusnap/gpusnap/snapshot"
)

// noInstance is what NVML's v1 process lists give as instance ids.
const noInstance = 0xFFFFFFFF

// pool is one pool of GPU memory: a whole GPU, or one MIG GPU instance (its
// compute instances share the instance's memory).
type pool struct {
	id     string // GPU UUID, or GPU UUID + "/gi/N"
	label  string // how a finding names it
	hasMIG bool   // a whole GPU split into MIG instances: its instances are checked, not it
	uuid   string // the GPU or MIG device UUID, for Finding.GPUUUID
	minor  *int   // the GPU's minor number: its /dev/nvidiaN
	memory *snapshot.Memory
	procs  []nvmlEntry // one per PID
	at     map[int]int // PID -> index in procs
}

// nvmlEntry is one process NVML lists on a pool.
type nvmlEntry struct {
	pool *pool
	list string // compute, graphics or mps
	// proc is NVML's entry, its PID the host PID of the process it names.
	proc snapshot.GPUProcess
	// nvmlPID is the PID as NVML gave it, where it named the process by a
	// PID of its own pid namespace (NSpid); else 0.
	nvmlPID int
}

// utilEntry is one utilization sample of a process on a GPU.
type utilEntry struct {
	gpu    string
	sample snapshot.ProcessUtilization
}

// nvmlIndex is NVML's view of one snapshot, by pool and by PID.
type nvmlIndex struct {
	unavailable string // why NVML was not read, or ""
	pools       []*pool
	poolByID    map[string]*pool
	byPID       map[int][]nvmlEntry
	util        map[int][]utilEntry
	gpuByMinor  map[int]*snapshot.GPU
	hostPID     func(int) int
}

// indexNVML indexes NVML's view of a snapshot whose processes are procs.
func indexNVML(nv *snapshot.NVML, procs []snapshot.Process) *nvmlIndex {
	ix := &nvmlIndex{
		hostPID:    hostPIDs(procs),
		poolByID:   make(map[string]*pool),
		byPID:      make(map[int][]nvmlEntry),
		util:       make(map[int][]utilEntry),
		gpuByMinor: make(map[int]*snapshot.GPU),
	}
	switch {
	case nv.Unavailable != "":
		ix.unavailable = nv.Unavailable
	case nv.Source == "disabled" || nv.Source == "":
		ix.unavailable = "NVML was not read"
	}
	for i := range nv.Devices {
		ix.addGPU(&nv.Devices[i])
	}
	for _, p := range ix.pools {
		for _, e := range p.procs {
			ix.byPID[e.proc.PID] = append(ix.byPID[e.proc.PID], e)
		}
	}
	return ix
}

func gpuID(g *snapshot.GPU) string {
	if g.UUID != "" {
		return g.UUID
	}
	return "index:" + strconv.Itoa(g.Index)
}

func (ix *nvmlIndex) addGPU(g *snapshot.GPU) {
	id := gpuID(g)
	if g.MinorNumber != nil {
		ix.gpuByMinor[*g.MinorNumber] = g
	}
	whole := ix.pool(id, &pool{label: "GPU " + id, uuid: g.UUID, minor: g.MinorNumber, memory: g.Memory, hasMIG: len(g.MIGDevices) > 0})
	// MIG instances are pools of their own; compute instances of one GPU
	// instance share its memory, so the first one met gives the figures.
	for i := range g.MIGDevices {
		m := &g.MIGDevices[i]
		p := ix.pool(migPoolID(id, uint32(m.GPUInstanceID)), &pool{
			label:  fmt.Sprintf("GPU %s MIG instance %d (%s)", id, m.GPUInstanceID, m.UUID),
			uuid:   m.UUID,
			minor:  g.MinorNumber,
			memory: m.Memory,
		})
		ix.add(p, "compute", m.ComputeProcesses)
		ix.add(p, "graphics", m.GraphicsProcesses)
	}
	for _, list := range []struct {
		name  string
		procs []snapshot.GPUProcess
	}{{"compute", g.ComputeProcesses}, {"graphics", g.GraphicsProcesses}, {"mps", g.MPSProcesses}} {
		for _, gp := range list.procs {
			p := whole
			if gi := gp.GPUInstanceID; gi != nil && *gi != noInstance {
				if mp := ix.poolByID[migPoolID(id, *gi)]; mp != nil {
					p = mp
				}
			}
			ix.add(p, list.name, []snapshot.GPUProcess{gp})
		}
	}
	for _, u := range g.ProcessUtilization {
		pid := ix.hostPID(u.PID)
		ix.util[pid] = append(ix.util[pid], utilEntry{gpu: id, sample: u})
	}
}

func migPoolID(gpu string, gi uint32) string {
	return gpu + "/gi/" + strconv.FormatUint(uint64(gi), 10)
}

// pool returns the pool with id, registering p under it when there is none.
func (ix *nvmlIndex) pool(id string, p *pool) *pool {
	if old := ix.poolByID[id]; old != nil {
		return old
	}
	p.id = id
	ix.pools = append(ix.pools, p)
	ix.poolByID[id] = p
	return p
}

// add lists processes on a pool once per PID: a process NVML lists as both
// compute and graphics, or on the GPU and on its MIG device, holds one
// allocation, not two. The larger figure wins.
func (ix *nvmlIndex) add(p *pool, list string, procs []snapshot.GPUProcess) {
	if p.at == nil {
		p.at = make(map[int]int)
	}
	for _, gp := range procs {
		e := nvmlEntry{pool: p, list: list, proc: gp}
		if host := ix.hostPID(gp.PID); host != gp.PID {
			e.nvmlPID, e.proc.PID = gp.PID, host
		}
		gp = e.proc
		i, dup := p.at[gp.PID]
		if !dup {
			p.at[gp.PID] = len(p.procs)
			p.procs = append(p.procs, e)
			continue
		}
		old := &p.procs[i]
		if gp.UsedGPUMemory != nil && (old.proc.UsedGPUMemory == nil || *gp.UsedGPUMemory > *old.proc.UsedGPUMemory) {
			old.proc.UsedGPUMemory = gp.UsedGPUMemory
		}
	}
}

// memoryOf finds the memory NVML gave a PID on a pool, and whether it listed it there at all.
func (ix *nvmlIndex) memoryOf(poolID string, pid int) (mem *uint64, listed bool) {
	for _, e := range ix.byPID[pid] {
		if e.pool.id == poolID {
			return e.proc.UsedGPUMemory, true
		}
	}
	return nil, false
}

// gpuUUID names the GPU of /dev/nvidiaN as NVML saw it at TO, else at FROM
// (NVML unread at TO): minor numbers hold within a boot.
func (c *comparison) gpuUUID(minor *int) string {
	if minor == nil {
		return ""
	}
	for _, ix := range []*nvmlIndex{c.toNVML, c.fromNVML} {
		if g := ix.gpuByMinor[*minor]; g != nil {
			return g.UUID
		}
	}
	return ""
}

// entryEvidence renders what NVML said about a process on a pool.
func entryEvidence(e nvmlEntry) string {
	mem := "used_gpu_memory not available"
	if e.proc.UsedGPUMemory != nil {
		mem = "used_gpu_memory " + bytesText(*e.proc.UsedGPUMemory)
	}
	pid := strconv.Itoa(e.proc.PID)
	if e.nvmlPID != 0 {
		pid = fmt.Sprintf("%d (host PID %d, found through NSpid)", e.nvmlPID, e.proc.PID)
	}
	return fmt.Sprintf("nvml: %s lists pid %s as a %s process, %s", e.pool.label, pid, e.list, mem)
}

// hostPIDs returns how a PID NVML gives is read against procs: a process's
// host PID as it is; else, where the proc root is not the host's (it shows no
// kernel thread: seen from inside a pid namespace), the PID of the only
// process that has it further down its NSpid chain, as snapshot.GPUUsage
// joins it, and that holds or maps an NVIDIA device, as a process with a GPU
// context does; else unchanged: no live process. On the host's /proc a PID
// no process has is an orphan, never a container's PID of the same number.
// A defunct process (a zombie) counts as none.
func hostPIDs(procs []snapshot.Process) func(int) int {
	host := make(map[int]bool, len(procs))
	inner := make(map[int]int) // namespaced PID -> host PID, -1 when several have it
	for i := range procs {
		if procs[i].KernelThread {
			return func(pid int) int { return pid }
		}
	}
	for i := range procs {
		p := &procs[i]
		if p.Defunct() {
			continue
		}
		host[p.PID] = true
		if len(p.NSpid) < 2 || !hasNVIDIADevice(p) {
			continue
		}
		for _, ns := range p.NSpid[1:] {
			if ns == p.PID {
				continue
			}
			if _, seen := inner[ns]; seen {
				inner[ns] = -1
			} else {
				inner[ns] = p.PID
			}
		}
	}
	return func(pid int) int {
		if h, ok := inner[pid]; ok && !host[pid] && h > 0 {
			return h
		}
		return pid
	}
}

// bytesText gives a byte count exactly and in binary units.
func bytesText(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%d bytes (%.2f GiB)", n, float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%d bytes (%.2f MiB)", n, float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}
