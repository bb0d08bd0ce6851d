package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// TODO: replaced by its issue's work.
func diffCommand() *cli.Command {
	return &cli.Command{
		Name:   "diff",
		Usage:  "not implemented yet",
		Action: func(*cli.Context) error { return errors.New("diff: not implemented yet") },
	}
}
