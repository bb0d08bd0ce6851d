package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// TODO: replaced by its issue's work.
func storeCommand() *cli.Command {
	return &cli.Command{
		Name:   "store",
		Usage:  "not implemented yet",
		Action: func(*cli.Context) error { return errors.New("store: not implemented yet") },
	}
}
