package watch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/nvmlread"
)

const (
	// gpuEventWait is one wait for NVML's GPU events, and so the longest a
	// stop waits for the wait under way. A driver that does not answer is
	// left behind, never waited on.
	gpuEventWait = 500 * time.Millisecond
	// gpuEventRetry spaces the waits after one failed.
	gpuEventRetry = time.Second
)

// openGPUEvents registers NVML's GPU events (critical Xids and ECC errors,
// as NVIDIA's device plugin watches them) and says, as watch_start's blind
// spots, which GPUs' events are not watched and why.
func openGPUEvents(opts nvmlread.Options) (*nvmlread.GPUEvents, []string) {
	ev, err := nvmlread.OpenGPUEvents(opts)
	if err != nil {
		return nil, []string{eventlog.BlindNVMLXid + " (" + err.Error() + ")"}
	}
	var blind []string
	for _, gpu := range slices.Sorted(maps.Keys(ev.Unwatched)) {
		blind = append(blind, fmt.Sprintf("%s%s (%s)", eventlog.BlindNVMLEvents, gpu, ev.Unwatched[gpu]))
	}
	return ev, blind
}

// recordGPUEvents records each GPU event NVML delivers until ctx is done or
// NVML says a GPU is lost. After that its answers cannot be trusted, and the
// event says that the watching ends. A failing wait is retried, and said
// once as a lost record of source nvml, since what happened meanwhile is not
// known.
func recordGPUEvents(ctx context.Context, ev *nvmlread.GPUEvents, r *recorder) {
	defer ev.Close()
	failing := ""
	for ctx.Err() == nil {
		e, err := ev.Next(gpuEventWait)
		switch {
		case errors.Is(err, nvmlread.ErrNoGPUEvent):
			failing = ""
			r.setGPUEventsOff("")
		case err != nil:
			r.setGPUEventsOff("NVML's event wait fails: " + err.Error())
			if err.Error() != failing {
				failing = err.Error()
				note := "NVML's GPU events: " + failing + " (retried; events until it answers are not known)"
				r.emit(eventlog.Event{Time: time.Now(), Kind: eventlog.KindLost, Source: eventlog.SourceNVML, Note: note})
				fmt.Fprintf(r.log, "gpusnap watch: events lost: %s\n", note)
			}
			select {
			case <-ctx.Done():
			case <-time.After(gpuEventRetry):
			}
		default:
			failing = ""
			r.setGPUEventsOff("")
			rec := eventlog.Event{Time: e.Time, Kind: eventlog.KindGPUEvent, Source: eventlog.SourceNVML, GPUUUID: e.GPUUUID,
				GPUEvent: e.Type, Xid: e.Xid, GPUInstanceID: e.GPUInstanceID, ComputeInstanceID: e.ComputeInstanceID}
			if e.Type == eventlog.GPUEventGPULost {
				// One event set serves every GPU, so none is watched after
				// this.
				rec.Note = "NVML answers that a GPU is lost: no GPU's events are watched after this"
				fmt.Fprintf(r.log, "gpusnap watch: %s\n", rec.Note)
				r.setGPUEventsOff("NVML answered at " + e.Time.UTC().Format(time.RFC3339) + " that " + cmp.Or(e.GPUUUID, "a GPU") + " is lost")
			}
			r.emit(rec)
			if e.Type == eventlog.GPUEventGPULost {
				return
			}
		}
	}
}
