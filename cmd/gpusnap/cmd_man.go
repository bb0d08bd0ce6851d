//go:build !urfave_cli_no_docs

package main

// The man command renders pages through urfave/cli's Markdown and roff code,
// which the release binary leaves out (the urfave_cli_no_docs tag). The
// build makes the package's man pages with a gpusnap-man built without it.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/diff"
)

// docCommands are the commands only a build with urfave/cli's docs has.
func docCommands() []*cli.Command { return []*cli.Command{manCommand()} }

func manCommand() *cli.Command {
	return &cli.Command{
		Name:      "man",
		Hidden:    true, // the build's, writing the package's man pages
		Usage:     "write the man pages of gpusnap and each command into DIR",
		UsageText: "gpusnap man DIR\n\nExample:\n  gpusnap man build/man",
		Action:    action(parseMan, runMan),
	}
}

type manOptions struct{ Dir string }

func parseMan(c *cli.Context) (manOptions, error) {
	if c.NArg() != 1 {
		return manOptions{}, usageError(fmt.Errorf("man takes one directory"))
	}
	return manOptions{Dir: c.Args().First()}, nil
}

// installedDocs ends every man page, saying where the package puts the
// documents the pages and --help name as docs/*.md.
const installedDocs = "The documents named docs/NAME.md (spec.md, diff.md, triage.md, bundle.md ...) are installed in " +
	"/usr/share/doc/gpusnap/, and the JSON Schema of each --json output in /usr/share/doc/gpusnap/schema/. " +
	"The allow list the package installs, read by default, is " + diff.DefaultAllowPath + "."

// runMan writes gpusnap.1 and gpusnap-COMMAND.1 (gpusnap-store-verify.1 for
// a subcommand) from the same definitions --help prints.
func runMan(_ context.Context, g globals, o manOptions) error {
	app := newApp(io.Discard, io.Discard)
	pages := map[string]*cli.App{"gpusnap": app}
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden {
				continue
			}
			name := prefix + "-" + c.Name
			pages[name] = &cli.App{
				Name: name, Usage: c.Usage, UsageText: c.UsageText, Description: c.Description,
				Flags: c.Flags, Commands: c.Subcommands, HideHelpCommand: true,
			}
			walk(name, c.Subcommands)
		}
	}
	walk("gpusnap", app.Commands)
	for name, page := range pages {
		page.Description = strings.TrimSpace(page.Description + "\n\n" + installedDocs)
		text, err := page.ToManWithSection(1)
		if err != nil {
			return fmt.Errorf("man page %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(o.Dir, name+".1"), []byte(text), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(g.Stderr, "gpusnap: wrote %d man pages in %s\n", len(pages), o.Dir)
	return nil
}
