package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/render"
)

func storeCommand() *cli.Command {
	return &cli.Command{
		Name:  "store",
		Usage: "look after the snapshot store",
		UsageText: "gpusnap store check|checkpoint|verify\n\nExamples:\n  gpusnap store check\n" +
			"  gpusnap store check --db /var/lib/gpusnap/gpusnap.db --json | jq .problems\n" +
			"  gpusnap store checkpoint --sign-key /etc/gpusnap/bundle.key > cp-$(date +%s)\n" +
			"  gpusnap store verify --checkpoint cp-1767225600 --pub bundle.pub",
		Action: func(*cli.Context) error {
			return usageError(errors.New("store needs a command: gpusnap store check, checkpoint or verify"))
		},
		Subcommands: []*cli.Command{{
			Name:  "check",
			Usage: "check the store for damage",
			UsageText: "gpusnap store check [--json]\n\nRuns bbolt's consistency check over every page, then checks that every snapshot\n" +
				"loads and that the process records and indexes agree. Exit 0 when sound, 2 when damaged.\n\n" +
				"Examples:\n  gpusnap store check --db /var/lib/gpusnap/gpusnap.db",
			Action: action(parseStoreCheck, runStoreCheck),
		}, storeCheckpointCommand(), storeVerifyCommand()},
	}
}

// checkReport is store check's --json output.
type checkReport struct {
	Path      string   `json:"path"`
	OK        bool     `json:"ok"`
	Snapshots int      `json:"snapshots"`
	Processes int      `json:"process_records"`
	Size      int64    `json:"size"`
	Problems  []string `json:"problems"`
}

// storeCheckOptions is empty, as store check takes no options of its own.
type storeCheckOptions struct{}

func parseStoreCheck(*cli.Context) (storeCheckOptions, error) { return storeCheckOptions{}, nil }

func runStoreCheck(_ context.Context, g globals, _ storeCheckOptions) error {
	r, err := g.host().Check()
	if err != nil {
		return err
	}
	out := checkReport{Path: g.DB, OK: len(r.Problems) == 0, Snapshots: r.Snapshots, Processes: r.Processes, Size: r.Size, Problems: r.Problems}
	if out.Problems == nil {
		out.Problems = []string{}
	}
	if g.JSON {
		if err := render.JSON(g.Stdout, out); err != nil {
			return err
		}
	} else if out.OK {
		fmt.Fprintf(g.Stdout, "store %s is sound: %d snapshots, %d process records, %d bytes\n", g.DB, r.Snapshots, r.Processes, r.Size)
	} else {
		for _, p := range r.Problems {
			fmt.Fprintln(g.Stdout, safetext.Line(p)) // names ids and keys of a store anyone could have crafted
		}
	}
	return r.Damage
}
