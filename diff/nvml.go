package diff

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// noInstance is what NVML's v1 process lists give as instance ids.
const noInstance = 0xFFFFFFFF

// pool is one pool of GPU memory, a whole GPU or one MIG GPU instance (its
// compute instances share the instance's memory).
type pool struct {
	id     string // GPU UUID, or GPU UUID + "/gi/N"
	label  string // how a finding names it
	hasMIG bool   // a whole GPU split into MIG instances, whose instances are checked, not it
	uuid   string // the GPU or MIG device UUID, for Finding.GPUUUID
	minor  *int   // the GPU's minor number, as in its /dev/nvidiaN
	memory *snapshot.Memory
	merge  snapshot.ProcessMerge // NVML's lists on the pool, merged per PID
	procs  []nvmlEntry           // one per PID
}

// nvmlEntry is one process NVML lists on a pool.
type nvmlEntry struct {
	pool *pool
	// proc is NVML's lists merged for the PID, its PID the host PID of the
	// process it names, Types the lists it is in.
	proc snapshot.GPUProcessUse
	// nvmlPID is the PID as NVML gave it, where it named the process by a
	// PID of its own pid namespace (NSpid), else 0.
	nvmlPID int
	// credit is the memory the entry accounts for on its pool, as
	// snapshot.Credits counts it, where an MPS server's clients'
	// allocations are theirs. It is nil where NVML gave no figure.
	credit *uint64
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
	pids        *snapshot.PIDJoin
}

// indexNVML indexes NVML's view of a snapshot whose processes are procs.
func indexNVML(nv *snapshot.NVML, procs []snapshot.Process) *nvmlIndex {
	ix := &nvmlIndex{
		pids:       snapshot.NewPIDJoin(procs),
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
		uses := p.merge.Uses()
		for k := range uses {
			uses[k].Process, uses[k].Join = ix.pids.Process(uses[k].PID)
		}
		credits := snapshot.Credits(uses)
		for k, u := range uses {
			e := nvmlEntry{pool: p, proc: u, credit: credits[k]}
			if host := ix.pids.HostPID(u.PID); host != u.PID {
				e.nvmlPID, e.proc.PID = u.PID, host
			}
			p.procs = append(p.procs, e)
		}
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
	// MIG instances are pools of their own. Compute instances of one GPU
	// instance share its memory, so the first one met gives the figures.
	for i := range g.MIGDevices {
		m := &g.MIGDevices[i]
		p := ix.pool(migPoolID(id, uint32(m.GPUInstanceID)), &pool{
			label:  fmt.Sprintf("GPU %s MIG instance %d (%s)", id, m.GPUInstanceID, m.UUID),
			uuid:   m.UUID,
			minor:  g.MinorNumber,
			memory: m.Memory,
		})
		for _, l := range m.ProcessLists() {
			p.merge.Add(l.Kind, l.Processes)
		}
	}
	for _, list := range g.ProcessLists() {
		for _, gp := range list.Processes {
			p := whole
			if gi := gp.GPUInstanceID; gi != nil && *gi != noInstance {
				if mp := ix.poolByID[migPoolID(id, *gi)]; mp != nil {
					p = mp
				}
			}
			p.merge.Add(list.Kind, []snapshot.GPUProcess{gp})
		}
	}
	for _, u := range g.ProcessUtilization {
		pid := ix.pids.HostPID(u.PID)
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

// memoryOf finds the memory a PID accounts for on a pool (nvmlEntry.credit),
// and whether NVML listed it there at all.
func (ix *nvmlIndex) memoryOf(poolID string, pid int) (mem *uint64, listed bool) {
	for _, e := range ix.byPID[pid] {
		if e.pool.id == poolID {
			return e.credit, true
		}
	}
	return nil, false
}

// gpuUUID names the GPU of /dev/nvidiaN as NVML saw it at TO, else at FROM
// (NVML unread at TO), since minor numbers hold within a boot.
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
	return fmt.Sprintf("nvml: %s lists pid %s as a %s process, %s", e.pool.label, pid, listNames(e.proc.Types), mem)
}

// listNames spells out the lists of GPUProcessUse.Types, so "C+G" is
// "compute and graphics".
func listNames(types string) string {
	names := map[string]string{"C": "compute", "G": "graphics", "M": "mps"}
	parts := strings.Split(types, "+")
	for i, t := range parts {
		if n, ok := names[t]; ok {
			parts[i] = n
		}
	}
	return strings.Join(parts, " and ")
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

// staleEntry says why NVML's entry for pid at TO is an earlier process's, or
// "" when it may be its own. It is stale when NVML listed pid at FROM for
// another process or none, or when the PID changed hands and the process now
// there, read in full, has no /dev/nvidia* open or mapped, which a GPU
// context keeps.
func (c *comparison) staleEntry(pid int) string {
	now := c.toByPID[pid]
	if now == nil || now.Defunct() {
		return "" // no live process makes it an orphan, not a stale entry
	}
	then := c.fromByPID[pid]
	if len(c.fromNVML.byPID[pid]) > 0 {
		switch {
		case (then == nil || then.Defunct()) && !slices.Contains(c.from.Scan.RefusedPIDs, pid):
			// Listed by NVML at FROM with no live process then, it was an orphan at FROM.
			return "NVML listed this PID at FROM with no live process, and lists it still: the PID was reused"
		case then != nil && then.Key() != now.Key():
			return fmt.Sprintf("NVML listed this PID at FROM for %s (%s): the PID was reused", then.Key(), then.Comm)
		}
		return ""
	}
	if then != nil && then.Key() != now.Key() && !now.UsesNVIDIA() && !c.toUnread[pid] {
		return fmt.Sprintf("at FROM the PID was %s (%s), and %s maps and holds no NVIDIA device: the PID was reused after a process on the GPU exited",
			then.Key(), then.Comm, now.Key())
	}
	return ""
}

// keepers names the processes that may keep a dead process's GPU context, and
// its memory, alive. A context lives while any descriptor on the GPU's
// /dev/nvidiaN that it was made through is open, and a forked child keeps its
// parent's. They hold or map the pool's GPU, did not at FROM, and NVML does
// not list them on the pool.
func (c *comparison) keepers(pl *pool) []string {
	if pl.minor == nil {
		return nil
	}
	var out []string
	since := " and which did not use it at FROM"
	if c.check {
		since = ""
	}
	for _, ch := range c.deviceUsers {
		if _, listed := c.toNVML.memoryOf(pl.id, ch.proc.PID); listed && c.staleEntry(ch.proc.PID) == "" {
			continue
		}
		for _, u := range ch.uses {
			if !u.nvidia() || u.gpuMinor == nil || *u.gpuMinor != *pl.minor || ch.prior[u.key()] != nil {
				continue
			}
			out = append(out, fmt.Sprintf("%s is held or mapped by %s (%s, exe %s), which NVML does not list there%s: it may keep the context alive",
				u.device, ch.proc.Key(), ch.proc.Comm, snapshot.ExeText(ch.proc.Exe, ch.proc.ExeDeleted), since))
			break
		}
	}
	return out
}
