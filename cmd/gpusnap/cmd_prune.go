package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// TODO: replaced by its issue's work.
func pruneCommand() *cli.Command {
	return &cli.Command{
		Name:   "prune",
		Usage:  "not implemented yet",
		Action: func(*cli.Context) error { return errors.New("prune: not implemented yet") },
	}
}
