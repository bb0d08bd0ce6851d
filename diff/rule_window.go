package diff

import (
	"fmt"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

// KindHiddenDeviceUse means the event log shows a live process use a device the capture cannot see it hold.
const KindHiddenDeviceUse = "hidden_device_use"

var _ = register(&Rule{
	Kind: KindHiddenDeviceUse, Title: "Hidden device use",
	Severities: []Severity{High},
	GPUUse:     true,
	compare:    []func(*comparison) []Finding{hiddenDeviceUses},
	check:      (*comparison).hiddenUses,
	Order:      110,
})

// KindWindowNotCovered means the event log does not cover the window where a watch was expected.
const KindWindowNotCovered = "window_not_covered"

var _ = register(&Rule{
	Kind: KindWindowNotCovered, Title: "Window not covered by watch",
	Severities: []Severity{Medium},
	compare:    []func(*comparison) []Finding{windowNotCovered},
	check:      func(c *comparison, _ *gpuSet) []Finding { return windowNotCovered(c) },
	Order:      120,
})

// maxCoverageEvidence bounds the problems one window_not_covered finding
// quotes, since a tenant that kills the watch again and again makes a gap each time.
const maxCoverageEvidence = 32

// hiddenDeviceUses reports a process the event log shows opening or mapping an
// NVIDIA device in the window that at TO is alive but holds and maps none of
// that GPU (seesDevice). It is high, as the device is held where /proc cannot
// show it (a unix socket's queue, an io_uring file) or was let go. It raises
// one finding per process and device.
func hiddenDeviceUses(c *comparison) []Finding {
	return c.hiddenUses(allGPUs)
}

// hiddenUses is hiddenDeviceUses of the devices of a GPU set (check's --gpus).
func (c *comparison) hiddenUses(gpus *gpuSet) []Finding {
	uses := c.windowUses(func(e *eventlog.Event) bool {
		p := c.toByKey[idOf(e.Process.PID, e.Process.StartTime)]
		return p != nil && !p.Defunct() && e.Kind != eventlog.KindNVML && e.Device != nil && !seesDevice(p, e.Device) &&
			gpus.hasDevice(&deviceUse{class: e.Device.Class, gpuMinor: e.Device.GPU})
	})
	var out []Finding
	for _, u := range uses {
		ref := processRef(c.toByKey[idOf(u.proc.PID, u.proc.StartTime)])
		out = append(out, Finding{
			Kind:     KindHiddenDeviceUse,
			Severity: High,
			Summary: fmt.Sprintf("%s opened or mapped %s in the window and is alive %s, but the capture sees it neither hold nor map that device (a descriptor parked in a socket or registered with io_uring is invisible to /proc)",
				describe(ref), u.device, c.at()),
			Process:  ref,
			Device:   u.device,
			GPUUUID:  u.gpu,
			Evidence: append(u.evidence(), c.at()+": no holder or mapping of that device in the capture of the process"),
		})
	}
	return out
}

// seesDevice reports whether the capture of p shows it hold or map the
// device an event names, a node of that GPU or, for a device naming no GPU
// (nvidiactl, nvidia-uvm), any NVIDIA device. Every CUDA process holds
// nvidiactl, so that alone cannot vouch for a GPU node it may have parked.
func seesDevice(p *snapshot.Process, d *eventlog.Device) bool {
	if d.GPU == nil {
		return p.UsesNVIDIA()
	}
	for _, u := range deviceUses(p, nil) {
		if u.nvidia() && u.gpuMinor != nil && *u.gpuMinor == *d.GPU {
			return true
		}
	}
	return false
}

// watchExpected reports whether a watch was to record the window, because
// one is configured (--expect-watch) or the log holds a watch's record from
// before the window.
func (c *comparison) watchExpected() bool {
	return c.opts.ExpectWatch || c.opts.Events != nil && c.opts.Events.Meta().Before != nil
}

// windowProblems lists every reason the event log does not cover the
// window, what reading it found and then the coverage's own problems (any
// kind eventlog.Coverage names, taken alike).
func (c *comparison) windowProblems() []eventlog.Problem {
	problems := c.opts.LogProblems
	switch {
	case c.opts.Events == nil && !c.watchExpected():
		return nil // no watch ever recorded and none is configured, so nothing was missed
	case c.opts.Events == nil && len(problems) == 0:
		return []eventlog.Problem{{Kind: eventlog.ProblemNoLog, Text: "the event log was not read"}}
	case c.opts.Events == nil:
		return problems
	}
	cov, err := eventlog.CoverSource(c.opts.Events, c.since, c.to.Host.CaptureStart)
	if err != nil {
		problems = append(problems, eventlog.Problem{Kind: eventlog.ProblemNoLog, Text: "the event log could not be read again: " + err.Error()})
	}
	return append(problems, cov.Problems()...)
}

// windowNotCovered reports each reason an expected watch's log does not cover
// the window (a gap, lost events, damaged lines, an unflushed end, a mode blind
// to some opens). It is medium, as a tenant can cause each, and a process that
// used a GPU then and left is unknown. Where no watch was expected, each is a
// note.
func windowNotCovered(c *comparison) []Finding {
	problems := c.windowProblems()
	if len(problems) == 0 {
		return nil
	}
	if !c.watchExpected() {
		for _, p := range problems {
			c.notCompared("event log: " + p.Text + ": a process that used a GPU then and left may not be known")
		}
		return nil
	}
	c.partial = true
	f := Finding{
		Kind:     KindWindowNotCovered,
		Severity: Medium,
		Summary: fmt.Sprintf("gpusnap watch was expected to record the window, and its event log does not cover it (%s): a process that used a GPU then and left may not be known",
			count(len(problems), "problem")),
	}
	for i, p := range problems {
		if i == maxCoverageEvidence {
			f.Evidence = append(f.Evidence, fmt.Sprintf("and %d more problems", len(problems)-i))
			break
		}
		f.Evidence = append(f.Evidence, p.Kind+": "+p.Text)
	}
	return []Finding{f}
}
