package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// TODO: replaced by its issue's work.
func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:   "verify",
		Usage:  "not implemented yet",
		Action: func(*cli.Context) error { return errors.New("verify: not implemented yet") },
	}
}
