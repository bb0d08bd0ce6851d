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

func runRm(_ context.Context, g globals, o rmOptions) error {
	st, err := openStore(g, false)
	if err != nil {
		return err
	}
	defer st.Close()
	// One removal per id: each is its own transaction, so an error on the
	// third leaves the first two removed, as printed.
	for _, arg := range o.IDs {
		id, err := st.Remove(arg, o.Force)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintln(g.Stdout, safetext.Escape(id)); err != nil { // a crafted store's id may hold anything
			return err
		}
	}
	return nil
}
