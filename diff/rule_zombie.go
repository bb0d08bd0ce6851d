package diff

import (
	"fmt"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// KindZombieGPUMemory means GPU memory grew by more than the threshold and no live process accounts for it.
const KindZombieGPUMemory = "zombie_gpu_memory"

var _ = register(&Rule{
	Kind: KindZombieGPUMemory, Title: "GPU memory nobody accounts for",
	Severities:     []Severity{High},
	WithoutProcess: true,
	compare:        []func(*comparison) []Finding{zombieGPUMemory, accelMemory},
	check:          zombieMemoryOfSet,
	Order:          90,
})

// zombieGPUMemory reports a GPU or MIG instance whose memory grew since FROM,
// by more than the threshold, beyond what live processes account for. Each
// live process NVML lists at TO accounts for its growth since FROM (all of it
// when new). A context of a gone or defunct process, or listed under nobody,
// counts against the GPU.
func zombieGPUMemory(c *comparison) []Finding {
	for _, end := range []struct {
		name string
		ix   *nvmlIndex
	}{{"FROM", c.fromNVML}, {"TO", c.toNVML}} {
		if end.ix.unavailable != "" {
			c.notCompared("NVML was not read at " + end.name + " (" + end.ix.unavailable + "): GPU memory was not compared")
			return nil
		}
	}
	var out []Finding
	for _, pl := range c.toNVML.pools {
		if pl.hasMIG {
			continue
		}
		before := c.fromNVML.poolByID[pl.id]
		if pl.memory == nil || before == nil || before.memory == nil {
			c.notCompared(pl.label + " lacks a memory figure at FROM or at TO: its memory was not compared")
			continue
		}
		if f, ok := c.zombie(pl, before); ok {
			out = append(out, f)
		}
	}
	return out
}

func (c *comparison) zombie(pl, before *pool) (Finding, bool) {
	growth := int64(pl.memory.Used) - int64(before.memory.Used)
	var accounted int64
	var lines []string
	unknown := 0
	for _, e := range pl.procs {
		pid := e.proc.PID
		who := fmt.Sprintf("pid %d", pid)
		p := c.toByPID[pid]
		if p != nil {
			who = fmt.Sprintf("pid %d (%s, %s)", pid, p.Comm, p.Key())
		}
		switch {
		case p != nil && p.Defunct():
			lines = append(lines, fmt.Sprintf("%s: defunct (exited, not reaped), not counted: %s", who, usedText(e)))
		case !c.live(pid):
			lines = append(lines, fmt.Sprintf("%s: no live process, not counted: %s", who, usedText(e)))
		case c.staleEntry(pid) != "":
			lines = append(lines, fmt.Sprintf("%s: PID reused since FROM, NVML's entry is the old process's, not counted: %s", who, usedText(e)))
		case e.credit == nil:
			unknown++
			lines = append(lines, who+": used_gpu_memory not available")
		default:
			mem := int64(*e.credit)
			prev, listed := c.fromNVML.memoryOf(pl.id, pid)
			if listed && prev != nil {
				lines = append(lines, fmt.Sprintf("%s: %s at TO, %s at FROM", who, creditText(e), bytesText(*prev)))
				mem -= int64(*prev)
			} else {
				lines = append(lines, who+": "+creditText(e)+c.newSince())
			}
			accounted += mem
		}
	}
	unaccounted := growth - accounted
	atTO := c.unaccountedAtTO()[pl.uuid]
	if c.check {
		// A check's FROM uses nothing, so its figure is the host's own, the
		// one ps and the metrics show.
		if atTO == nil {
			return Finding{}, false
		}
		unaccounted = int64(*atTO)
	}
	if unaccounted <= int64(c.opts.ZombieThreshold) {
		return Finding{}, false
	}
	// A check's FROM is a host with nothing used, so its figure says nothing.
	var evidence []string
	since := " more than at FROM"
	if c.check {
		since = ""
	} else {
		evidence = append(evidence, fmt.Sprintf("nvml: %s memory.used at FROM: %s", before.label, bytesText(before.memory.Used)))
	}
	evidence = append(evidence, fmt.Sprintf("nvml: %s memory.used %s: %s", pl.label, c.at(), bytesText(pl.memory.Used)))
	if len(pl.procs) == 0 {
		evidence = append(evidence, "nvml lists no process "+c.at())
	}
	evidence = append(evidence, lines...)
	if own := snapshot.DriverOwn(pl.memory); own > 0 {
		evidence = append(evidence, fmt.Sprintf("nvml: %s memory the driver keeps for itself (its reserve) %s: %s, nobody's context", pl.label, c.at(), bytesText(own)))
	}
	if atTO != nil {
		evidence = append(evidence, fmt.Sprintf("nvml: %s memory no live process accounts for %s: %s", pl.label, c.at(), bytesText(*atTO)))
	}
	evidence = append(evidence, fmt.Sprintf("unaccounted: %s, above the threshold of %s",
		signedBytes(unaccounted), bytesText(c.opts.ZombieThreshold)))
	evidence = append(evidence, c.keepers(pl)...)
	if unknown > 0 {
		// Still high, as docs/spec.md (Findings) has every zombie. The evidence says who may hold it.
		evidence = append(evidence, fmt.Sprintf("%s with no memory figure may hold it", count(unknown, "live process")))
	}
	return Finding{
		Kind:     KindZombieGPUMemory,
		Severity: High,
		Summary: fmt.Sprintf("%s holds %s%s that no live process accounts for",
			pl.label, strings.TrimPrefix(signedBytes(unaccounted), "+"), since),
		GPUUUID:  pl.uuid,
		Evidence: evidence,
	}, true
}

func usedText(e nvmlEntry) string {
	if e.proc.UsedGPUMemory == nil {
		return "used_gpu_memory not available"
	}
	return bytesText(*e.proc.UsedGPUMemory)
}

// creditText is the memory an entry accounts for, and, for an MPS server
// credited less than NVML's figure, why.
func creditText(e nvmlEntry) string {
	if e.credit == nil || e.proc.UsedGPUMemory == nil || *e.credit == *e.proc.UsedGPUMemory {
		return usedText(e)
	}
	return fmt.Sprintf("%s of the %s NVML lists for it (an MPS server whose figure counts its clients' allocations too: those are theirs)",
		bytesText(*e.credit), bytesText(*e.proc.UsedGPUMemory))
}

func signedBytes(n int64) string {
	if n < 0 {
		return "-" + bytesText(uint64(-n))
	}
	return "+" + bytesText(uint64(n))
}

// unaccountedAtTO is, by GPU or MIG device UUID, the memory no live process
// accounts for at TO. It is snapshot.Unaccounted, the figure ps and the metrics show.
func (c *comparison) unaccountedAtTO() map[string]*uint64 {
	if c.toUnaccounted == nil {
		c.toUnaccounted = map[string]*uint64{}
		for _, g := range snapshot.GPUUsage(c.to) {
			c.toUnaccounted[g.UUID] = g.Unaccounted
			for _, m := range g.MIG {
				c.toUnaccounted[m.UUID] = m.Unaccounted
			}
		}
	}
	return c.toUnaccounted
}

// newSince marks a process NVML lists that FROM did not. In a diff it is new
// since FROM, and a check has no FROM, so nothing is new.
func (c *comparison) newSince() string {
	if c.check {
		return ""
	}
	return ", new since FROM"
}

// zombieMemoryOfSet is zombie_gpu_memory in a check. It covers the pools of
// the GPUs checked, with a note where NVML was not read, and the other
// vendors' devices checked (accelMemory), every one where no list narrows the
// check.
func zombieMemoryOfSet(c *comparison, gpus *gpuSet) []Finding {
	var out []Finding
	for _, f := range accelMemory(c) {
		if gpus.all || gpus.accel[f.Device] {
			out = append(out, f)
		}
	}
	if c.toNVML.unavailable != "" {
		c.notes = append(c.notes, "NVML was not read ("+c.toNVML.unavailable+"): GPU memory was not checked")
		return out
	}
	for _, f := range zombieGPUMemory(c) {
		if pl := c.toNVML.poolByUUID(f.GPUUUID); pl == nil || gpus.hasPool(pl) {
			out = append(out, f)
		}
	}
	return out
}
