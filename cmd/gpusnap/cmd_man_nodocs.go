//go:build urfave_cli_no_docs

package main

import "github.com/urfave/cli/v2"

// docCommands are none in a build without urfave/cli's docs. The release
// binary is such a build, and a gpusnap-man built beside it wrote its man
// pages.
func docCommands() []*cli.Command { return nil }
