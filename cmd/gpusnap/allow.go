package main

import (
	"errors"
	"io/fs"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/diff"
)

// allowFlag is --allow of every command that judges: the package's allow
// list (diff.DefaultAllowPath) unless another is given, "" for none.
func allowFlag(usage string) cli.Flag {
	return &cli.StringFlag{Name: "allow", Value: diff.DefaultAllowPath, EnvVars: []string{"GPUSNAP_ALLOW"},
		Usage: usage + " (`FILE`; format in docs/diff.md; \"\" for none; the default is read where it exists)"}
}

// loadAllow reads --allow. The default, not asked for and absent (a host
// without the package), is no list; any list asked for that cannot be read
// is an error.
func loadAllow(c *cli.Context) (*diff.AllowList, error) {
	path := c.String("allow")
	if path == "" {
		return nil, nil
	}
	if path == diff.DefaultAllowPath && !c.IsSet("allow") {
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
	}
	return diff.LoadAllow(path)
}
