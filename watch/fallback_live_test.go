package watch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/livetest"
)

// heardFallback is a fallback on the live /proc that takes the proc
// connector as heard without subscribing: only what a test notes is named,
// and each loss it records is kept. Its first rescan (every process) is done.
type heardFallback struct {
	*fallbackSource
	losses []string
	uses   []eventlog.Event
}

func newHeardFallback(t *testing.T) *heardFallback {
	t.Helper()
	proc, err := capture.OpenProcRoot("/proc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Close() })
	h := &heardFallback{fallbackSource: newFallbackSource(proc, time.Second)}
	h.heard, h.lost = true, func(why string) { h.losses = append(h.losses, why) }
	h.rescan(t)
	return h
}

// rescanAvoiding runs one rescan whose share of the sweep is neither pid's
// nor the one that lists /proc again.
func (h *heardFallback) rescanAvoiding(t *testing.T, pid int) {
	t.Helper()
	h.sweep = 1
	if pid%heardSweep == 2 {
		h.sweep = 2
	}
	h.rescan(t)
}

func (h *heardFallback) rescan(t *testing.T) {
	t.Helper()
	err := h.fallbackSource.rescan(context.Background(), func(events ...eventlog.Event) {
		for _, e := range events {
			if e.Kind == eventlog.KindUsing {
				h.uses = append(h.uses, e)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// saw reports whether a using event names p and path.
func (h *heardFallback) saw(p livetest.Proc, path string) bool {
	for _, e := range h.uses {
		if e.Process.PID == p.PID && e.Process.StartTime == p.StartTime && e.Device.Path == path {
			return true
		}
	}
	return false
}

// TestLiveFallbackReadsWhatTheConnectorNames: where the connector is heard,
// a rescan does not list /proc; a device holder the connector did not name
// (nor young, nor in this interval's share) is not read, and once the
// connector names it (an exec) the next rescan finds it, and keeps it young.
func TestLiveFallbackReadsWhatTheConnectorNames(t *testing.T) {
	loop := livetest.NewLoop(t)
	h := newHeardFallback(t)
	holder := livetest.Hold(t, loop.Node)
	h.rescanAvoiding(t, holder.PID)
	if h.saw(holder, loop.Node) {
		t.Fatalf("holder %d, named by nothing, was read: /proc was listed or the sweep read it", holder.PID)
	}
	h.note(procEvent{what: procEventExec, pid: holder.PID, tgid: holder.PID})
	h.rescanAvoiding(t, holder.PID)
	if !h.saw(holder, loop.Node) {
		t.Errorf("holder %d, named by the connector, was not found using %s", holder.PID, loop.Node)
	}
	if h.young[holder.PID].IsZero() {
		t.Errorf("holder %d, just exec'd, is not young", holder.PID)
	}
	if len(h.losses) != 0 {
		t.Errorf("losses recorded: %q", h.losses)
	}
}

// TestLiveFallbackLossRescansEverything: a loss the connector reports (an
// overrun, a gap) is recorded once, and the next rescan reads every process:
// a holder no event named is found there.
func TestLiveFallbackLossRescansEverything(t *testing.T) {
	loop := livetest.NewLoop(t)
	h := newHeardFallback(t)
	holder := livetest.Hold(t, loop.Node)
	h.rescanAvoiding(t, holder.PID)
	if h.saw(holder, loop.Node) {
		t.Fatalf("holder %d, named by nothing, was read before any loss", holder.PID)
	}
	h.mu.Lock()
	h.loss("its socket overflowed (ENOBUFS)")
	h.loss("3 messages of CPU 1 missing")
	h.mu.Unlock()
	h.rescanAvoiding(t, holder.PID)
	if !h.saw(holder, loop.Node) {
		t.Errorf("holder %d was not found by the rescan after the loss", holder.PID)
	}
	if len(h.losses) != 1 || !strings.Contains(h.losses[0], "ENOBUFS") || !strings.Contains(h.losses[0], "2 losses") ||
		!strings.Contains(h.losses[0], "reads every process") {
		t.Errorf("losses recorded: %q", h.losses)
	}
}
