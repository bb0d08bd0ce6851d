package main

import (
	"cmp"
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/render"
	"github.com/gpusnap/gpusnap/session"
)

func pruneCommand() *cli.Command {
	return &cli.Command{
		Name:  "prune",
		Usage: "remove old snapshots, keeping the newest and every tenant's latest baseline",
		UsageText: "gpusnap prune [--keep-last N] [--older-than DUR] [--tenant T] [--label L] [--force] [--dry-run]\n\n" +
			"Among the snapshots --tenant and --label select (all by default), one is kept when it is one of the\n" +
			"N newest or newer than DUR; the others are removed, except a tenant's latest baseline (unless --force).\n" +
			"Prints each removed snapshot (--json: an array like list's).\n\nExamples:\n" +
			"  gpusnap prune --keep-last 100\n  gpusnap prune --older-than 720h --dry-run\n  gpusnap prune --label post --keep-last 10",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "keep-last", Usage: "keep the `N` newest"},
			&cli.DurationFlag{Name: "older-than", Usage: "remove only snapshots older than `DUR` (720h)"},
			&cli.StringFlag{Name: "tenant", Usage: "prune only snapshots of tenant `T`"},
			&cli.StringFlag{Name: "label", Usage: "prune only snapshots labelled `L`"},
			&cli.BoolFlag{Name: "force", Usage: "also remove tenants' latest baselines"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print what would be removed, remove nothing"},
		},
		Action: action(parsePrune, runPrune),
	}
}

// pruneOptions are prune's flags.
type pruneOptions struct {
	Prune session.Prune
}

func parsePrune(c *cli.Context) (pruneOptions, error) {
	p := session.Prune{
		Filter:    session.Filter{Tenant: c.String("tenant"), Label: c.String("label")},
		KeepLast:  c.Int("keep-last"),
		OlderThan: c.Duration("older-than"),
		Force:     c.Bool("force"),
		DryRun:    c.Bool("dry-run"),
	}
	if p.KeepLast == 0 && p.OlderThan == 0 {
		return pruneOptions{}, usageError(fmt.Errorf("prune needs --keep-last N and/or --older-than DUR"))
	}
	return pruneOptions{Prune: p}, nil
}

func runPrune(_ context.Context, g globals, o pruneOptions) error {
	p := o.Prune
	removed, err := g.host().Prune(p)
	if err != nil {
		return err
	}
	if g.JSON {
		if removed == nil {
			removed = []session.Meta{}
		}
		return render.JSON(g.Stdout, removed)
	}
	for _, m := range removed {
		fmt.Fprintf(g.Stdout, "%s %s %s\n", safetext.Escape(m.ID), safetext.Escape(m.Label), cmp.Or(safetext.Escape(m.Tenant), "-"))
	}
	verb := "removed"
	if p.DryRun {
		verb = "would remove"
	}
	fmt.Fprintf(g.Stderr, "gpusnap: %s %d snapshots\n", verb, len(removed))
	return nil
}
