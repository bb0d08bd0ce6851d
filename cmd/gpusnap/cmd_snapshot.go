package main

import (
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
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
	if !c.Bool("no-store") {
		if err := storeSnapshot(g, snap); err != nil {
			return err
		}
	}
	return printSnapshot(g, snap)
}

// storeSnapshot puts a capture into --db. Commands open the store after
// capturing, so its lock is held for the write alone and not for the /proc walk.
func storeSnapshot(g globals, snap *snapshot.Snapshot) error {
	st, err := openStore(g, false)
	if err != nil {
		return err
	}
	if err := st.Put(snap); err != nil {
		_ = st.Close()
		return err
	}
	if err := st.Close(); err != nil {
		return fmt.Errorf("store %s: %w", g.DB, err)
	}
	return nil
}

// openStore opens --db; readers open it read-only and never block each other.
func openStore(g globals, readOnly bool) (*store.Store, error) {
	return store.Open(g.DB, store.Options{ReadOnly: readOnly, LockTimeout: g.LockTimeout})
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
