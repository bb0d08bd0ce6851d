package main

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/metrics"
)

func textfileFlag() cli.Flag {
	return &cli.StringFlag{Name: "textfile", Usage: "write the result as Prometheus metrics to `FILE`, atomically, for node_exporter's textfile collector (docs/metrics.md)"}
}

// writeTextfile records a run, errors included, in --textfile's file when
// given, so a fleet sees a node whose gpusnap could not say. A failed write
// never hides the verdict. Beside findings or an error it is one more stderr
// line, and beside a clean run it is the error (exit 2), since the asked-for
// result was not written.
func writeTextfile(ctx context.Context, stderr io.Writer, path string, run metrics.Run, err error) error {
	if path == "" {
		return err
	}
	run.End = time.Now()
	run.Verdict = verdictOf(err)
	set := metrics.New(buildVersion())
	set.Observe(run)
	werr := set.WriteTextfile(ctx, path)
	if werr == nil {
		return err
	}
	if err == nil {
		return werr
	}
	warn(globals{Stderr: stderr}, werr)
	return err
}

// verdictOf is the verdict of a command that returned err.
func verdictOf(err error) metrics.Verdict {
	var st statusError
	switch {
	case err == nil:
		return metrics.VerdictClean
	case errors.As(err, &st) && st.code == exitFindings:
		return metrics.VerdictFindings
	case errors.As(err, &st) && st.code == exitClean:
		return metrics.VerdictClean
	default:
		return metrics.VerdictError
	}
}
