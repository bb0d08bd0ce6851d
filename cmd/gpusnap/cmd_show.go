package main

import (
	"context"
	"errors"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/render"
)

func showCommand() *cli.Command {
	return &cli.Command{
		Name:  "show",
		Usage: "show a stored snapshot",
		UsageText: "gpusnap show ID [--json]\n\nA summary: host, scan counts, NVML, and every process using an NVIDIA device.\n" +
			"--json prints the whole snapshot, exactly as `gpusnap snapshot --json` printed it.\n\nExamples:\n" +
			"  gpusnap show 20260301-1012\n  gpusnap show --json \"$(gpusnap list --json | jq -r '.[0].id')\"",
		Action: action(parseShow, runShow),
	}
}

// showOptions are show's argument, the snapshot to show.
type showOptions struct {
	ID string
}

func parseShow(c *cli.Context) (showOptions, error) {
	if c.NArg() != 1 {
		return showOptions{}, usageError(errors.New("show needs one snapshot ID"))
	}
	return showOptions{ID: c.Args().First()}, nil
}

func runShow(_ context.Context, g globals, o showOptions) error {
	if g.JSON {
		head, procs, err := g.host().StoredJSON(o.ID, render.AppendProcessJSON)
		if err != nil {
			return err
		}
		return render.StoredSnapshotJSON(g.Stdout, head, procs)
	}
	snap, err := g.host().Show(o.ID)
	if err != nil {
		return err
	}
	return render.SnapshotSummary(g.Stdout, snap)
}
