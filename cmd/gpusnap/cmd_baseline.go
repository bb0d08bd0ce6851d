package main

import (
	"errors"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/snapshot"
)

func baselineCommand() *cli.Command {
	return &cli.Command{
		Name:  "baseline",
		Usage: "capture and store the baseline of a tenant, before it runs",
		UsageText: "gpusnap baseline --tenant T [--json]\n\nRun it before the tenant's job starts (a Slurm prolog, a pod's init);\n" +
			"`gpusnap diff --tenant T` after the job compares against the newest baseline of T.\n\nExamples:\n" +
			"  id=$(gpusnap baseline --tenant \"$SLURM_JOB_ID\")\n  gpusnap baseline --tenant pod-7f3c --json | jq .id",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "tenant", Usage: "the tenant `T` about to run (required)"},
		},
		Action: runBaseline,
	}
}

func runBaseline(c *cli.Context) error {
	g, err := loadGlobals(c)
	if err != nil {
		return err
	}
	tenant := c.String("tenant")
	if tenant == "" {
		return usageError(errors.New("baseline needs --tenant T"))
	}
	snap, err := snapshot.Capture(c.Context, g.captureOptions(snapshot.LabelBaseline, tenant))
	if err != nil {
		return err
	}
	if err := storeSnapshot(g, snap); err != nil {
		return err
	}
	return printSnapshot(g, snap)
}
