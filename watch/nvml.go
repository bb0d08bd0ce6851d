package watch

import (
	"context"
	"strconv"
	"time"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/nvmlread"
	"github.com/gpusnap/gpusnap/snapshot"
)

// nvmlPoll reads NVML at each --util-interval, in both modes. A process NVML
// lists on a GPU it did not list before is an event, whatever the kernel
// hooks saw of it, and the utilization of each GPU and of its processes is a
// sample in a util record.
type nvmlPoll struct {
	sampler *nvmlread.Sampler
	util    *utilRecords
	proc    *capture.ProcRoot
	ids     *identities
	listed  map[string]bool // GPU UUID NUL PID, at the last poll
	// off says why polling stopped (NVML unavailable), for the watch_start record.
	off string
}

func newNVMLPoll(opts nvmlread.Options, proc *capture.ProcRoot) *nvmlPoll {
	return &nvmlPoll{sampler: nvmlread.NewSampler(opts, time.Now()), util: newUtilRecords(proc.StartTime),
		proc: proc, ids: newIdentities(proc), listed: map[string]bool{}}
}

// poll reads NVML once. NVML unavailable (no driver here) stops the polling
// and says why, and is not an error of the watch.
func (n *nvmlPoll) poll(ctx context.Context, emit func(...eventlog.Event)) error {
	if n.off != "" {
		return nil
	}
	nv, err := n.sampler.Read()
	if err != nil {
		return err
	}
	if nv.Unavailable != "" {
		n.off = "NVML: " + nv.Unavailable
		return nil
	}
	now := time.Now()
	n.util.add(now, samplesOf(&nv), emit)
	listed := map[string]bool{}
	var fresh []int
	var uuids []string
	for _, g := range nv.Devices {
		lists := g.ProcessLists()
		for j := range g.MIGDevices {
			lists = append(lists, g.MIGDevices[j].ProcessLists()...)
		}
		for _, l := range lists {
			for _, gp := range l.Processes {
				key := g.UUID + "\x00" + strconv.Itoa(gp.PID)
				if listed[key] {
					continue
				}
				listed[key] = true
				if !n.listed[key] {
					fresh = append(fresh, gp.PID)
					uuids = append(uuids, g.UUID)
				}
			}
		}
	}
	n.listed = listed
	if len(fresh) == 0 {
		return nil
	}
	procs, err := n.proc.Processes(ctx, fresh)
	if err != nil {
		return err
	}
	byPID := make(map[int]*snapshot.Process, len(procs))
	for i := range procs {
		byPID[procs[i].PID] = &procs[i]
	}
	for i, pid := range fresh {
		p := &eventlog.Process{PID: pid}
		note := ""
		if sp := byPID[pid]; sp != nil {
			p = fromSnapshot(sp, n.ids)
		} else {
			note = "NVML lists a PID no live process has"
		}
		emit(eventlog.Event{Time: now, Kind: eventlog.KindNVML, Source: eventlog.SourceNVML, Process: p, GPUUUID: uuids[i], Note: note})
	}
	return nil
}
