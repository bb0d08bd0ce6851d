package diff

import (
	"fmt"

	"github.com/gpusnap/gpusnap/eventlog"
)

// maxCoverageEvidence bounds the problems one window_not_covered finding
// quotes: a tenant that kills the watch again and again makes a gap each time.
const maxCoverageEvidence = 32

// hiddenDeviceUses: the event log shows a process open or map an NVIDIA
// device in the window, and at TO the process is alive while the capture
// sees it hold and map no NVIDIA device: the device is held where /proc
// cannot show it (an fd parked in a unix socket's queue, an io_uring
// registered file) or was used and let go. High: gpusnap cannot see what
// the process keeps. One finding per process and device.
func hiddenDeviceUses(c *comparison) []Finding {
	return c.hiddenUses(allGPUs)
}

// hiddenUses is hiddenDeviceUses of the devices of a GPU set (check's --gpus).
func (c *comparison) hiddenUses(gpus *gpuSet) []Finding {
	uses := c.windowUses(func(e *eventlog.Event) bool {
		p := c.toByKey[idOf(e.Process.PID, e.Process.StartTime)]
		return p != nil && !p.Defunct() && !p.UsesNVIDIA() && e.Kind != eventlog.KindNVML && e.Device != nil &&
			gpus.hasDevice(&deviceUse{class: e.Device.Class, gpuMinor: e.Device.GPU})
	})
	var out []Finding
	for _, u := range uses {
		ref := processRef(c.toByKey[idOf(u.proc.PID, u.proc.StartTime)])
		out = append(out, Finding{
			Kind:     KindHiddenDeviceUse,
			Severity: High,
			Summary: fmt.Sprintf("%s opened or mapped %s in the window and is alive at TO, but the capture sees it neither hold nor map an NVIDIA device (a descriptor parked in a socket or registered with io_uring is invisible to /proc)",
				describe(ref), u.device),
			Process:  ref,
			Device:   u.device,
			GPUUUID:  u.gpu,
			Evidence: append(u.evidence(), "at TO: no holder or mapping of an NVIDIA device in the capture of the process"),
		})
	}
	return out
}

// watchExpected reports whether a watch was to record the window: one is
// configured (--expect-watch), or the log holds a watch's record from
// before the window.
func (c *comparison) watchExpected() bool {
	return c.opts.ExpectWatch || c.opts.Events != nil && c.opts.Events.Meta().Before != nil
}

// windowProblems lists every reason the event log does not cover the
// window: what reading it found, then the coverage's own problems (any
// kind eventlog.Coverage names, taken alike).
func (c *comparison) windowProblems() []eventlog.Problem {
	problems := c.opts.LogProblems
	switch {
	case c.opts.Events == nil && !c.watchExpected():
		return nil // no watch ever recorded, and none is configured: nothing was missed
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

// windowNotCovered: where a watch was expected to record the window, every
// reason its log does not cover it (a gap, lost events, damaged lines, a
// flush that never reached TO, a mode that cannot see some opens) is one
// window_not_covered finding, medium: a tenant can cause each of them, and
// a process that used a GPU then and left is not known. Where no watch was
// expected, each is a note, as a window without a watch is.
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
