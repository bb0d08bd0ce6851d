package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/ocsf"
	"github.com/gpusnap/gpusnap/render"
)

func eventsCommand() *cli.Command {
	return &cli.Command{
		Name:  "events",
		Usage: "list what gpusnap watch recorded: opens and mappings of NVIDIA devices, the processes that made them, and NVML's GPU events (Xid, ECC, GPU lost)",
		UsageText: "gpusnap events [--tenant T] [--since TIME|DUR] [--util [--gpu UUID]] [--json]\n\n" +
			"--tenant T lists the events of T's window: from its newest baseline to the post snapshot after it\n" +
			"(or now). Spans no watch recorded, and events the kernel dropped, are said on stderr. --util prints\n" +
			"watch's utilization samples instead, one line a sample (--json: an array of GPUs, each with its samples).\n\n" +
			"Examples:\n  gpusnap events --since 1h\n  gpusnap events --tenant \"$SLURM_JOB_ID\" --json | jq '.[] | select(.kind==\"mmap\")'",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "tenant", Usage: "the events between tenant `T`'s newest baseline and its post snapshot (or now)"},
			&cli.StringFlag{Name: "since", Usage: "only events at or after `TIME` (RFC 3339 or YYYY-MM-DD) or within the last DUR (1h)"},
			&cli.BoolFlag{Name: "util", Usage: "print the GPUs' and processes' utilization samples as a table (--json: arrays)"},
			&cli.StringFlag{Name: "gpu", Usage: "with --util: only the GPU (or MIG instance) `UUID`, with its MIG instances"},
		}, ocsfFlags()...),
		Action: action(parseEvents, runEvents),
	}
}

// eventsOptions are events' flags.
type eventsOptions struct {
	Tenant string
	Since  time.Time // zero for the log's start
	OCSF   ocsfOutput
	Util   bool
	GPU    string
}

func parseEvents(c *cli.Context) (eventsOptions, error) {
	o := eventsOptions{Tenant: c.String("tenant"), Util: c.Bool("util"), GPU: c.String("gpu")}
	var err error
	if o.OCSF, err = parseOCSF(c); err != nil {
		return o, err
	}
	switch {
	case o.GPU != "" && !o.Util:
		return o, usageError(errors.New("--gpu needs --util"))
	case o.Util && (o.OCSF.Stdout || o.OCSF.File != ""):
		return o, usageError(errors.New("--util prints samples, which are no OCSF findings: leave out --format ocsf and --ocsf-file"))
	}
	if s := c.String("since"); s != "" {
		o.Since, err = parseSince(s, time.Now())
	}
	return o, err
}

func runEvents(_ context.Context, g globals, o eventsOptions) error {
	res, err := g.host().Events(o.Tenant, o.Since, time.Now())
	if err != nil {
		return err
	}
	if res.Damaged > 0 {
		fmt.Fprintf(g.Stderr, "gpusnap events: %d lines of the event log are not events (torn by a watch that died mid-write, or damaged)\n", res.Damaged)
	}
	if res.Broken > 0 {
		fmt.Fprintf(g.Stderr, "gpusnap events: %d records break their segment's hash chain (removed, edited, reordered or re-timed)\n", res.Broken)
	}
	for _, f := range res.Faults {
		fmt.Fprintf(g.Stderr, "gpusnap events: %s\n", f)
	}
	for _, gap := range res.Cover.Gaps {
		fmt.Fprintf(g.Stderr, "gpusnap events: no watch recorded from %s\n", gap)
	}
	if res.Cover.Lost > 0 {
		fmt.Fprintf(g.Stderr, "gpusnap events: the kernel dropped %d events in this window: the log is not complete\n", res.Cover.Lost)
	}
	if o.Util {
		return writeUtil(g, eventlog.Series(res.Events, o.GPU))
	}
	findings := func() []ocsf.Finding {
		host, _ := os.Hostname() // the store's host, as watch records this host's events
		return ocsf.FromEvents(res.Events, ocsfSource(host, "events"), render.EventLine)
	}
	if err := o.OCSF.appendFile(findings); err != nil {
		return err
	}
	if o.OCSF.Stdout {
		return ocsf.Write(g.Stdout, findings())
	}
	if g.JSON {
		events := res.Events
		if events == nil {
			events = []eventlog.Event{}
		}
		return render.JSON(g.Stdout, events)
	}
	return render.EventsText(g.Stdout, res.Events)
}

// writeUtil prints the samples, one line a sample or with --json the array.
// What a series could not record goes to stderr.
func writeUtil(g globals, series []eventlog.UtilSeries) error {
	if g.JSON {
		if series == nil {
			series = []eventlog.UtilSeries{}
		}
		return render.JSON(g.Stdout, series)
	}
	for _, s := range series {
		for _, n := range s.Notes {
			fmt.Fprintf(g.Stderr, "gpusnap events: %s: %s\n", safetext.Escape(s.GPU), safetext.Escape(n))
		}
		if s.More > 0 {
			fmt.Fprintf(g.Stderr, "gpusnap events: %s: %d process samples past the 64 busiest a sample were not recorded\n", safetext.Escape(s.GPU), s.More)
		}
	}
	return render.UtilTable(g.Stdout, series)
}
