package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// TODO: replaced by its issue's work.
func psCommand() *cli.Command {
	return &cli.Command{
		Name:   "ps",
		Usage:  "not implemented yet",
		Action: func(*cli.Context) error { return errors.New("ps: not implemented yet") },
	}
}
