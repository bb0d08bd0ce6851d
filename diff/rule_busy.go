package diff

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
)

// KindGPUBusyWithoutProcess means watch's samples show a GPU busy while no process used it.
const KindGPUBusyWithoutProcess = "gpu_busy_without_process"

var _ = register(&Rule{
	Kind: KindGPUBusyWithoutProcess, Title: "GPU busy without a process",
	Severities:     []Severity{High},
	WithoutProcess: true,
	compare:        []func(*comparison) []Finding{gpuBusyWithoutProcess},
	check:          func(c *comparison, gpus *gpuSet) []Finding { return c.busyWithoutProcess(gpus, true) },
	Order:          170,
})

// busyAloneRun is how many consecutive samples a GPU must be busy with no
// process for gpu_busy_without_process, 10 s at the default interval, past
// a context's teardown.
const busyAloneRun = 10

// gpuBusyWithoutProcess reports a GPU or MIG instance at 50% or more for 10
// consecutive samples while NVML listed no process on it and no live process at
// TO holds or maps its node. It is high, as a hard-killed workload's context
// still runs or NVML misses a use. With ongoing (check), only a run lasting to
// the last sample counts.
func gpuBusyWithoutProcess(c *comparison) []Finding { return c.busyWithoutProcess(allGPUs, false) }

func (c *comparison) busyWithoutProcess(gpus *gpuSet, ongoing bool) []Finding {
	u := c.utilization()
	var out []Finding
	for _, id := range slices.Sorted(maps.Keys(u.gpus)) {
		g := u.gpus[id]
		s := g.shape
		run, from, to := s.longestAlone, s.longestFrom, s.aloneTo
		if ongoing {
			run, from, to = s.busyWithout, s.aloneFrom, s.lastAt
		}
		if run < busyAloneRun {
			continue
		}
		node := g.series.Parent
		if node == "" {
			node = id
		}
		minor := c.minorOf(node)
		if !gpus.all && !(minor != nil && gpus.minors[*minor]) && !gpus.uuids[id] && !gpus.uuids[node] {
			continue
		}
		users := c.nodeUsers(minor)
		if len(users) > 0 {
			c.notes = append(c.notes, fmt.Sprintf("%s was busy with no process NVML listed for %d samples, while %s held or mapped its node %s: not raised",
				gpuName(minor, id), run, users[0], c.at()))
			continue
		}
		var nodeText string
		if minor != nil {
			nodeText = fmt.Sprintf("no live process %s holds or maps /dev/nvidia%d", c.at(), *minor)
		} else {
			nodeText = "its node is not known " + c.at() + " (NVML does not show " + node + "): no holder of it could be looked for"
		}
		at := from
		out = append(out, Finding{
			Kind:     KindGPUBusyWithoutProcess,
			Severity: High,
			Summary: fmt.Sprintf("%s was at %d%% or more for %d consecutive samples (%s to %s) while NVML listed no process on it",
				gpuName(minor, id), busyAlone, run, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339)),
			GPUUUID:  id,
			Time:     &at,
			Evidence: []string{s.Text(), nodeText},
		})
	}
	return out
}

// minorOf is the minor number of the GPU with uuid at TO, or nil.
func (c *comparison) minorOf(uuid string) *int {
	for _, g := range c.to.NVML.Devices {
		if g.UUID == uuid {
			return g.MinorNumber
		}
	}
	return nil
}

// nodeUsers names the live processes at TO that hold or map /dev/nvidiaN of
// minor, or any NVIDIA node where minor is nil. It leaves out uses already
// there at FROM and those the allow list takes, because nvidia-persistenced
// and DCGM hold every node and must not silence a GPU busy with no process.
func (c *comparison) nodeUsers(minor *int) []string {
	var out []string
	for _, ch := range c.deviceUsers {
		if ch.proc.Defunct() {
			continue
		}
		for _, u := range ch.uses {
			if ch.prior[u.key()] != nil || c.opts.Allow != nil &&
				c.opts.Allow.match(&Finding{Kind: KindGPUBusyWithoutProcess, Process: processRef(ch.proc), Device: u.device}, ch.proc) != nil {
				continue
			}
			if u.nvidia() && u.gpuMinor != nil && (minor == nil || *u.gpuMinor == *minor) {
				out = append(out, ch.proc.Key()+" ("+ch.proc.Comm+", pid "+strconv.Itoa(ch.proc.PID)+")")
				break
			}
		}
	}
	return out
}
