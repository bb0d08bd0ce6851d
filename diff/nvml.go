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
	memory *snapshot.Memory
	procs  []nvmlEntry // one per PID
	at     map[int]int // PID -> index in procs
}

// nvmlEntry is one process NVML lists on a pool.
type nvmlEntry struct {
	pool *pool
	list string // compute, graphics or mps
	proc snapshot.GPUProcess
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
}

func indexNVML(nv *snapshot.NVML) *nvmlIndex {
	ix := &nvmlIndex{
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
	whole := ix.pool(id, &pool{label: "GPU " + id, uuid: g.UUID, memory: g.Memory, hasMIG: len(g.MIGDevices) > 0})
	// MIG instances are pools of their own; compute instances of one GPU
	// instance share its memory, so the first one met gives the figures.
	for i := range g.MIGDevices {
		m := &g.MIGDevices[i]
		p := ix.pool(migPoolID(id, uint32(m.GPUInstanceID)), &pool{
			label:  fmt.Sprintf("GPU %s MIG instance %d (%s)", id, m.GPUInstanceID, m.UUID),
			uuid:   m.UUID,
			memory: m.Memory,
		})
		add(p, "compute", m.ComputeProcesses)
		add(p, "graphics", m.GraphicsProcesses)
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
			add(p, list.name, []snapshot.GPUProcess{gp})
		}
	}
	for _, u := range g.ProcessUtilization {
		ix.util[u.PID] = append(ix.util[u.PID], utilEntry{gpu: id, sample: u})
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
func add(p *pool, list string, procs []snapshot.GPUProcess) {
	if p.at == nil {
		p.at = make(map[int]int)
	}
	for _, gp := range procs {
		i, dup := p.at[gp.PID]
		if !dup {
			p.at[gp.PID] = len(p.procs)
			p.procs = append(p.procs, nvmlEntry{pool: p, list: list, proc: gp})
			continue
		}
		e := &p.procs[i]
		if gp.UsedGPUMemory != nil && (e.proc.UsedGPUMemory == nil || *gp.UsedGPUMemory > *e.proc.UsedGPUMemory) {
			e.proc.UsedGPUMemory = gp.UsedGPUMemory
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

// gpuUUIDForMinor names the GPU of /dev/nvidiaN.
func (ix *nvmlIndex) gpuUUIDForMinor(minor *int) string {
	if minor == nil {
		return ""
	}
	if g := ix.gpuByMinor[*minor]; g != nil {
		return g.UUID
	}
	return ""
}

// entryEvidence renders what NVML said about a process on a pool.
func entryEvidence(e nvmlEntry) string {
	mem := "used_gpu_memory not available"
	if e.proc.UsedGPUMemory != nil {
		mem = "used_gpu_memory " + bytesText(*e.proc.UsedGPUMemory)
	}
	return fmt.Sprintf("nvml: %s lists pid %d as a %s process, %s", e.pool.label, e.proc.PID, e.list, mem)
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
