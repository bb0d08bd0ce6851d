package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/internal/safetext"
)

func rmCommand() *cli.Command {
	return &cli.Command{
		Name:  "rm",
		Usage: "remove stored snapshots",
		UsageText: "gpusnap rm [--force] ID...\n\nIds may be abbreviated to any unique prefix. A tenant's latest baseline is kept\n" +
			"unless --force: the tenant's next diff needs it. Prints each removed id.\n\nExamples:\n  gpusnap rm 20260301-1012",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "force", Usage: "also remove a tenant's latest baseline"},
		},
		Action: action(parseRm, runRm),
	}
}

// rmOptions are rm's flags and arguments.
type rmOptions struct {
	IDs   []string
	Force bool
}

func parseRm(c *cli.Context) (rmOptions, error) {
	o := rmOptions{IDs: c.Args().Slice(), Force: c.Bool("force")}
	if len(o.IDs) == 0 {
		return o, usageError(errors.New("rm needs the ID of a snapshot"))
	}
	return o, nil
}

// runRm prints each id removed, after the store is closed, and then the
// error that stopped the removals, if one did.
func runRm(_ context.Context, g globals, o rmOptions) error {
	removed, err := g.host().Remove(o.IDs, o.Force)
	for _, id := range removed {
		if _, perr := fmt.Fprintln(g.Stdout, safetext.Escape(id)); perr != nil { // a crafted store's id may hold anything
			return errors.Join(err, perr)
		}
	}
	return err
}
