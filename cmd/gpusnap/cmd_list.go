package main

import (
	"cmp"
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/render"
	"github.com/gpusnap/gpusnap/session"
)

func listCommand() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list stored snapshots, newest first",
		UsageText: "gpusnap list [--tenant T] [--label L] [--since TIME|DUR] [--json]\n\nExamples:\n" +
			"  gpusnap list --tenant job-4242\n  gpusnap list --label baseline --since 24h\n  gpusnap list --json | jq -r '.[0].id'",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "tenant", Usage: "only snapshots of tenant `T`"},
			&cli.StringFlag{Name: "label", Usage: "only snapshots labelled `L` (snapshot, baseline, post ...)"},
			&cli.StringFlag{Name: "since", Usage: "only snapshots taken at or after `TIME` (RFC 3339 or YYYY-MM-DD) or within the last DUR (24h)"},
		},
		Action: action(parseList, runList),
	}
}

// listOptions are list's flags, which say what snapshots to list.
type listOptions struct {
	Filter session.Filter
}

func parseList(c *cli.Context) (listOptions, error) {
	o := listOptions{Filter: session.Filter{Tenant: c.String("tenant"), Label: c.String("label")}}
	var err error
	if s := c.String("since"); s != "" {
		o.Filter.Since, err = parseSince(s, time.Now())
	}
	return o, err
}

func runList(_ context.Context, g globals, o listOptions) error {
	metas, err := g.host().List(o.Filter)
	if err != nil {
		return err
	}
	if g.JSON {
		return render.JSON(g.Stdout, metas)
	}
	tw := tabwriter.NewWriter(g.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLABEL\tTENANT\tHOST\tTIME")
	for _, m := range metas {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", safetext.Escape(m.ID), safetext.Escape(m.Label), cmp.Or(safetext.Escape(m.Tenant), "-"),
			safetext.Escape(m.Host), m.Time.Local().Format(time.RFC3339))
	}
	return tw.Flush()
}

// parseSince reads --since, a time (RFC 3339, or a date in local time) or a
// duration back from now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation(time.DateOnly, s, time.Local); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usageError(fmt.Errorf("--since %q is neither a time (2026-03-01T10:00:00Z, 2026-03-01) nor a duration (24h)", s))
}
