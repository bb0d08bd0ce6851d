package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// TODO: replaced by its issue's work.
func showCommand() *cli.Command {
	return &cli.Command{
		Name:   "show",
		Usage:  "not implemented yet",
		Action: func(*cli.Context) error { return errors.New("show: not implemented yet") },
	}
}
