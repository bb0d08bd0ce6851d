package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// TODO: replaced by its issue's work.
func rmCommand() *cli.Command {
	return &cli.Command{
		Name:   "rm",
		Usage:  "not implemented yet",
		Action: func(*cli.Context) error { return errors.New("rm: not implemented yet") },
	}
}
