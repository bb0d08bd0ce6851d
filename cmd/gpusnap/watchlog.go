package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

func expectWatchFlag() cli.Flag {
	return &cli.BoolFlag{Name: "expect-watch", EnvVars: []string{"GPUSNAP_EXPECT_WATCH"},
		Usage: "gpusnap watch is configured to record on this host: a window its event log does not cover whole is a window_not_covered finding (docs/diff.md)"}
}

// windowEvents opens what gpusnap watch recorded from since to TO's
// capture end, to be walked from disk by the rules (never all held), or nil
// where no watch ever ran with this store. It first waits,
// bounded (eventlog.DefaultFlushWait), for the log to reach TO's capture
// start, so a process that used a GPU and left just before TO is in it;
// what kept the log from covering the window is in problems. A log that
// cannot be read is also a line on stderr: the diff goes on without it.
func windowEvents(g globals, since time.Time, to *snapshot.Snapshot) (eventlog.Source, []eventlog.Problem) {
	dir := eventlog.JournalDir(g.DB)
	var problems []eventlog.Problem
	if _, err := os.Lstat(dir); err == nil {
		if p := eventlog.WaitReached(dir, to.Host.CaptureStart, eventlog.DefaultFlushWait); p != nil {
			problems = append(problems, *p)
		}
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
		fmt.Fprintf(g.Stderr, "gpusnap: the event log cannot be read, so processes that came and went between the snapshots are not known: %v\n", err)
		return nil, append(problems, eventlog.Problem{Kind: eventlog.ProblemNoLog, Text: "the event log cannot be read: " + err.Error()})
	}
	if m := w.Meta(); m.Damaged > 0 {
		fmt.Fprintf(g.Stderr, "gpusnap: %d lines of the event log are not events (damaged, or torn by a watch that died mid-write)\n", m.Damaged)
	}
	return w, problems
}
