package nvmlread

import (
	"cmp"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpusnap/gpusnap/snapshot"
)

// Sampler reads NVML at each of watch's intervals, taking a snapshot's
// whole view, each GPU's utilization, and the per-process samples since the
// last read (nvmlDeviceGetProcessUtilization, chained by
// lastSeenTimeStamp). go-nvml's wrapper of the newer
// nvmlDeviceGetProcessesUtilizationInfo passes the driver no buffer, so it
// returns no samples, and the older call serves every driver.
type Sampler struct {
	opts Options
}

// sampling is what a Sampler keeps between reads.
type sampling struct {
	// since is, by GPU UUID, the newest sample timestamp read (NVML's
	// clock, microseconds). The next read asks for those after it.
	since map[string]uint64
	// start is when the watch started, and a fixture's series is replayed
	// from it.
	start time.Time
}

// NewSampler reads as opts say. A fixture's series is replayed from start.
func NewSampler(opts Options, start time.Time) *Sampler {
	opts.sampling = &sampling{since: map[string]uint64{}, start: start}
	return &Sampler{opts: opts}
}

// Read reads NVML once. Each GPU's ProcessUtilization holds the samples
// newer than the last read's, every one of them, by PID and time. None
// (NVML has no sample because no process ran) is zero use, not an error.
func (s *Sampler) Read() (snapshot.NVML, error) { return s.opts.ReadNVML() }

// newer keeps the samples after the last read of uuid, and moves its mark
// to the newest. A driver that ignores the timestamp it is given (or a
// mock) answers old samples again, which are dropped here.
func (sm *sampling) newer(uuid string, samples []nvml.ProcessUtilizationSample) []snapshot.ProcessUtilization {
	last := sm.since[uuid]
	var out []snapshot.ProcessUtilization
	for _, s := range samples {
		if s.TimeStamp > last {
			out = append(out, utilizationOf(s))
			sm.since[uuid] = max(sm.since[uuid], s.TimeStamp)
		}
	}
	slices.SortFunc(out, func(a, b snapshot.ProcessUtilization) int {
		return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.Timestamp, b.Timestamp))
	})
	return out
}
