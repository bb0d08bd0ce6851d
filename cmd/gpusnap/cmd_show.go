package main

import (
	"context"
	"errors"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/render"
	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
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

// showOptions are show's argument: the snapshot to show.
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
	var raw []byte
	var snap *snapshot.Snapshot
	err := readStore(g, func(st *store.Store) (err error) {
		if g.JSON {
			raw, err = st.GetJSON(o.ID)
		} else {
			snap, err = st.GetSelected(o.ID, snapshot.ClassNVIDIA, (*snapshot.Process).UsesNVIDIA)
		}
		return err
	})
	switch {
	case err != nil:
		return err
	case g.JSON:
		return render.StoredSnapshotJSON(g.Stdout, raw)
	}
	return render.SnapshotSummary(g.Stdout, snap)
}
