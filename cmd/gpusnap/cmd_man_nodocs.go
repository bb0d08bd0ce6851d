//go:build urfave_cli_no_docs

package main

import "github.com/urfave/cli/v2"

// docCommands are none in a build without urfave/cli's docs: the release
// binary, whose man pages a gpusnap-man built beside it wrote.
func docCommands() []*cli.Command { return nil }
