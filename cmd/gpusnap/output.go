package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/render"
)

// warn prints one line on stderr for a failure that does not end the command.
func warn(g globals, err error) {
	fmt.Fprintf(g.Stderr, "gpusnap: %s\n", safetext.Line(strings.ReplaceAll(err.Error(), "\n", " ")))
}

// printResult prints a diff's or a check's result as --json's object, else
// as the text report (its blocks, or with verbose every finding in full).
func printResult(g globals, r *diff.Result, verbose bool) error {
	if g.JSON {
		return render.JSON(g.Stdout, r)
	}
	return render.ResultText(g.Stdout, r, verbose)
}

// verboseFlag is --verbose of diff and check. It prints every finding in
// full in the text report, as the bundle's pages and --json have them.
func verboseFlag() cli.Flag {
	return &cli.BoolFlag{Name: "verbose", Usage: "print every finding in full (process, cmdline, device, evidence) instead of one line each"}
}
