package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/render"
)

// warn prints one line on stderr for a failure that does not end the command.
func warn(g globals, err error) {
	fmt.Fprintf(g.Stderr, "gpusnap: %s\n", safetext.Line(strings.ReplaceAll(err.Error(), "\n", " ")))
}

// humanSize prints bytes in binary units, as the kernel and nvidia-smi do.
func humanSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + "B"
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTP"[exp])
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printResult prints a diff's or a check's result: --json's object, else the
// text report.
func printResult(g globals, r *diff.Result) error {
	if g.JSON {
		return render.JSON(g.Stdout, r)
	}
	return render.ResultText(g.Stdout, r)
}
