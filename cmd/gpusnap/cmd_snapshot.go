package main

import (
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/snapshot"
)

func snapshotCommand() *cli.Command {
	return &cli.Command{
		Name:      "snapshot",
		Usage:     "capture the host now, store it and print its id",
		UsageText: "gpusnap snapshot [--tenant T] [--label L] [--json]\n\nExamples:\n  gpusnap snapshot\n  gpusnap snapshot --json --no-nvml | jq '.processes[] | select(.mappings)'",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "tenant", Usage: "the tenant `T` this snapshot belongs to"},
			&cli.StringFlag{Name: "label", Value: snapshot.LabelSnapshot, Usage: "a `LABEL` for the snapshot"},
			&cli.StringFlag{Name: "export-nvml-fixture", Usage: "also write NVML's state to the new `FILE` as an NVML fixture (see docs/nvml.md)"},
		},
		Action: runSnapshot,
	}
}

func runSnapshot(c *cli.Context) error {
	g, err := loadGlobals(c)
	if err != nil {
		return err
	}
	snap, err := snapshot.Capture(c.Context, g.captureOptions(c.String("label"), c.String("tenant")))
	if err != nil {
		return err
	}
	if path := c.String("export-nvml-fixture"); path != "" {
		if err := snapshot.ExportNVMLFixture(path, snap.NVML); err != nil {
			return err
		}
	}
	return printSnapshot(g, snap)
}

// printSnapshot prints the whole snapshot with --json, else its id alone on
// the last line, so scripts can do id=$(gpusnap snapshot).
func printSnapshot(g globals, snap *snapshot.Snapshot) error {
	if g.JSON {
		enc := json.NewEncoder(g.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(snap)
	}
	_, err := fmt.Fprintln(g.Stdout, snap.ID)
	return err
}
