package main

import (
	"context"

	"github.com/urfave/cli/v2"
)

// action is how every command runs, in restic's shape. The global flags are
// read, parse fills the command's options struct from its flags and
// arguments, and run does the work with a context, the globals and the
// options, never a *cli.Context, so a test calls run directly.
func action[O any](parse func(*cli.Context) (O, error), run func(context.Context, globals, O) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		g, err := loadGlobals(c)
		if err != nil {
			return err
		}
		o, err := parse(c)
		if err != nil {
			return err
		}
		return run(c.Context, g, o)
	}
}
