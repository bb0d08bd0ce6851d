package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// TODO: replaced by its issue's work.
func listCommand() *cli.Command {
	return &cli.Command{
		Name:   "list",
		Usage:  "not implemented yet",
		Action: func(*cli.Context) error { return errors.New("list: not implemented yet") },
	}
}
