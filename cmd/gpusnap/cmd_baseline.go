package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// TODO: replaced by its issue's work.
func baselineCommand() *cli.Command {
	return &cli.Command{
		Name:   "baseline",
		Usage:  "not implemented yet",
		Action: func(*cli.Context) error { return errors.New("baseline: not implemented yet") },
	}
}
