package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/nvmlread"
	"github.com/gpusnap/gpusnap/render"
	"github.com/gpusnap/gpusnap/snapshot"
)

func snapshotCommand() *cli.Command {
	return &cli.Command{
		Name:  "snapshot",
		Usage: "capture the host now, store it and print its id",
		UsageText: "gpusnap snapshot [--tenant T] [--label L] [--no-store] [--json]\n\nExamples:\n  gpusnap snapshot\n" +
			"  gpusnap snapshot --json --no-nvml | jq '.processes[] | select(.mappings)'\n  gpusnap snapshot --no-store --json > host.json",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "tenant", Usage: "the tenant `T` this snapshot belongs to"},
			&cli.StringFlag{Name: "label", Value: snapshot.LabelSnapshot, Usage: "a `LABEL` for the snapshot"},
			&cli.BoolFlag{Name: "no-store", Usage: "print the snapshot without storing it"},
			&cli.StringFlag{Name: "export-nvml-fixture", Usage: "also write NVML's state to the new `FILE` as an NVML fixture (see docs/nvml.md)"},
		},
		Action: action(parseSnapshot, runSnapshot),
	}
}

// snapshotOptions are snapshot's flags.
type snapshotOptions struct {
	Tenant, Label     string
	NoStore           bool
	ExportNVMLFixture string // also write NVML's state to this new file
}

func parseSnapshot(c *cli.Context) (snapshotOptions, error) {
	return snapshotOptions{Tenant: c.String("tenant"), Label: c.String("label"), NoStore: c.Bool("no-store"),
		ExportNVMLFixture: c.String("export-nvml-fixture")}, nil
}

func runSnapshot(ctx context.Context, g globals, o snapshotOptions) error {
	snap, err := captureHost(ctx, g, o.Label, o.Tenant)
	if err != nil {
		return err
	}
	sayCapturePath(g, snap)
	if path := o.ExportNVMLFixture; path != "" {
		if err := nvmlread.ExportFixture(ctx, path, snap.NVML); err != nil {
			return err
		}
	}
	var encoded [][]byte // the processes' JSON as stored, printed from it
	if !o.NoStore {
		if encoded, _, err = g.host().Put(snap); err != nil {
			return err
		}
	}
	if g.JSON {
		return render.SnapshotJSON(g.Stdout, snap, encoded)
	}
	return printSnapshot(g, snap)
}

// sayCapturePath says on stderr which path read the live /proc, and why
// not BPF where it was not. Baseline, diff and ps record it in the
// snapshot's scan without a word (their stderr is for findings' trouble).
func sayCapturePath(g globals, snap *snapshot.Snapshot) {
	if g.ProcRoot != "/proc" {
		return // a tree laid out like /proc is read one way only
	}
	line := "capture: " + snap.Scan.CapturePath
	if snap.Scan.CaptureNote != "" {
		line += " (" + snap.Scan.CaptureNote + ")"
	}
	fmt.Fprintln(g.Stderr, line)
}

// printSnapshot prints the whole snapshot with --json, else its id alone on
// the last line, so scripts can do id=$(gpusnap snapshot).
func printSnapshot(g globals, snap *snapshot.Snapshot) error {
	if g.JSON {
		return render.SnapshotJSON(g.Stdout, snap, nil)
	}
	_, err := fmt.Fprintln(g.Stdout, snap.ID)
	return err
}
