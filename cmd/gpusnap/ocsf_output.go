package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/ocsf"
)

// ocsfFlags are --format and --ocsf-file, on diff, check and events.
func ocsfFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "format", Value: "text", Usage: "what stdout gets: `FORMAT` text (or --json's object), or ocsf: one OCSF Detection Finding (class 2004) a line (docs/ocsf.md)"},
		&cli.StringFlag{Name: "ocsf-file", Usage: "append each finding as an OCSF Detection Finding to the JSON-lines `FILE`, all or none, for a log shipper"},
	}
}

// ocsfOutput is where OCSF findings go, to stdout (--format ocsf), a file,
// both or neither.
type ocsfOutput struct {
	Stdout bool
	File   string
}

func parseOCSF(c *cli.Context) (ocsfOutput, error) {
	o := ocsfOutput{File: c.String("ocsf-file")}
	switch f := c.String("format"); f {
	case "text":
	case "ocsf":
		if lookup(c, "json", (*cli.Context).Bool) {
			return o, usageError(errors.New("--format ocsf prints JSON lines: it cannot be combined with --json"))
		}
		o.Stdout = true
	default:
		return o, usageError(fmt.Errorf("--format %q: want text or ocsf", f))
	}
	if c.IsSet("ocsf-file") && o.File == "" {
		return o, usageError(errors.New("--ocsf-file is empty"))
	}
	return o, nil
}

// print writes the findings to stdout when --format ocsf, else calls
// other, the command's own output.
func (o ocsfOutput) print(g globals, fs func() []ocsf.Finding, other func() error) error {
	if !o.Stdout {
		return other()
	}
	return ocsf.Write(g.Stdout, fs())
}

// appendFile appends the findings to --ocsf-file, when given. Its error is
// a line on stderr beside the verdict, never in its place.
func (o ocsfOutput) appendFile(fs func() []ocsf.Finding) error {
	if o.File == "" {
		return nil
	}
	return ocsf.Append(o.File, fs())
}

// ocsfSource is where a command's OCSF findings come from.
func ocsfSource(host, command string) ocsf.Source {
	return ocsf.Source{Host: host, Version: buildVersion(), Command: command}
}
