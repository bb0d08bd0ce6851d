package session

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/kmsg"
	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
)

// Compare diffs p with the kernel log and watch's events between its ends,
// reading the tenant's history from the store, read-only, only when the
// diff asks for it (diff.CompareWithHistory). It fills opts' window fields,
// which a bundle of the pair then carries.
func (h *Host) Compare(p Pair, opts *diff.Options) (*diff.Result, error) {
	from, to := p.From, p.To
	opts.KernelLog = kmsg.ReadWindow(h.KernelLog, from.KernelLog, to.KernelLog)
	opts.Events, opts.LogProblems = h.Window(from.Host.CaptureStart, to)
	return diff.CompareWithHistory(from, to, opts, func() (history []*snapshot.Snapshot, err error) {
		err = h.read(func(st *store.Store) error {
			history, err = st.History(from, to, diff.HistoryLimit)
			return err
		})
		return history, err
	})
}

// Window opens what gpusnap watch recorded from since to TO's capture end,
// or nil where no watch ran with this store. It first waits, bounded, for
// the log to reach TO's capture start, so a process that left just before
// TO is in it. What kept the log from covering the window is in problems.
func (h *Host) Window(since time.Time, to *snapshot.Snapshot) (eventlog.Source, []eventlog.Problem) {
	dir := eventlog.JournalDir(h.DB)
	var problems []eventlog.Problem
	if p := h.settle(to); p != nil {
		problems = append(problems, *p)
	}
	end := to.Host.CaptureStart
	if to.Host.CaptureEnd.After(end) {
		end = to.Host.CaptureEnd // a process that left while TO was captured is in neither snapshot
	}
	w, err := eventlog.OpenWindow(dir, since, end)
	switch {
	case errors.Is(err, eventlog.ErrNoLog):
		return nil, append(problems, eventlog.Problem{Kind: eventlog.ProblemNoLog, Text: "there is no event log at " + dir + " (no gpusnap watch ever recorded with this store)"})
	case err != nil:
		h.Warn(fmt.Sprintf("the event log cannot be read, so processes that came and went between the snapshots are not known: %v", err))
		return nil, append(problems, eventlog.Problem{Kind: eventlog.ProblemNoLog, Text: "the event log cannot be read: " + err.Error()})
	}
	if m := w.Meta(); m.Damaged > 0 {
		h.Warn(fmt.Sprintf("%d lines of the event log are not events (damaged, or torn by a watch that died mid-write)", m.Damaged))
	}
	return w, problems
}

// settle waits, bounded, for the event log to reach to's capture start, once
// for each snapshot, and returns what kept it from doing so.
func (h *Host) settle(to *snapshot.Snapshot) *eventlog.Problem {
	if h.settled == to {
		return h.settledProblem
	}
	dir := eventlog.JournalDir(h.DB)
	var p *eventlog.Problem
	if _, err := os.Lstat(dir); err == nil {
		p = eventlog.WaitReached(dir, to.Host.CaptureStart, eventlog.DefaultFlushWait)
	}
	h.settled, h.settledProblem = to, p
	return p
}
