package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// TODO: replaced by its issue's work.
func bundleCommand() *cli.Command {
	return &cli.Command{
		Name:   "bundle",
		Usage:  "not implemented yet",
		Action: func(*cli.Context) error { return errors.New("bundle: not implemented yet") },
	}
}
