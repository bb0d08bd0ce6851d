package main

import (
	"fmt"
	"strings"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/render"
)

// warn prints one line on stderr for a failure that does not end the command.
func warn(g globals, err error) {
	fmt.Fprintf(g.Stderr, "gpusnap: %s\n", safetext.Line(strings.ReplaceAll(err.Error(), "\n", " ")))
}

// printResult prints a diff's or a check's result: --json's object, else the
// text report.
func printResult(g globals, r *diff.Result) error {
	if g.JSON {
		return render.JSON(g.Stdout, r)
	}
	return render.ResultText(g.Stdout, r)
}
