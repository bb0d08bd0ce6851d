package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/bundle"
	"github.com/gpusnap/gpusnap/internal/safefile"
	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/render"
)

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "check an evidence bundle: every hash, the signature, and what it holds",
		UsageText: "gpusnap verify FILE|DIR [--pub KEY]\n\n" +
			"Checks a bundle tarball, or the directory it was extracted to: the BagIt bag (every payload file\n" +
			"against manifest-sha256.txt, every tag file against tagmanifest-sha256.txt, Payload-Oxum), the DSSE\n" +
			"envelope's signature, the in-toto statement's subjects and findings digest, and the store log's\n" +
			"inclusion proofs. With --pub the signature must be that key's.\n" +
			"Exit status: 0 intact, 1 something altered, added or removed (named), 2 not readable, or a layout\n" +
			"this gpusnap does not know. FILE - reads standard input.\n\n" +
			"Examples:\n  gpusnap verify incident-4242.tar.gz --pub bundle.pub\n  tar xzf incident-4242.tar.gz && gpusnap verify incident-4242",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "pub", Usage: "the public `KEY` file (from gpusnap keygen) the bundle must be signed with"},
		},
		Action: action(parseVerify, runVerify),
	}
}

// verifyOptions are verify's argument and flags.
type verifyOptions struct {
	File string // the bundle, - for standard input
	Pub  string // --pub, the key the bundle must be signed with
}

func parseVerify(c *cli.Context) (verifyOptions, error) {
	if c.NArg() != 1 {
		return verifyOptions{}, usageError(fmt.Errorf("verify takes one FILE, got %d arguments", c.NArg()))
	}
	return verifyOptions{File: c.Args().First(), Pub: c.String("pub")}, nil
}

func runVerify(_ context.Context, g globals, o verifyOptions) error {
	name := o.File
	var trusted ed25519.PublicKey
	var err error
	if o.Pub != "" {
		if trusted, err = bundle.ReadPublicKey(o.Pub); err != nil {
			return err
		}
	}
	rep, err := verifyBundle(name, trusted)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if g.JSON {
		if err := render.JSON(g.Stdout, struct {
			File   string `json:"file"`
			Intact bool   `json:"intact"`
			*bundle.Verification
		}{name, rep.Intact(), rep}); err != nil {
			return err
		}
	} else if err := printVerify(g.Stdout, name, rep); err != nil {
		// A listing that did not reach its file is no verdict, so it exits 2, not 0.
		return err
	}
	if !rep.Intact() {
		return statusError{exitFindings}
	}
	return nil
}

// verifyBundle verifies the tarball name, standard input for -, or the
// extracted bundle when name is a directory (not followed through a link).
func verifyBundle(name string, trusted ed25519.PublicKey) (*bundle.Verification, error) {
	if name == "-" {
		return bundle.Verify(os.Stdin, trusted)
	}
	if fi, err := os.Lstat(name); err == nil && fi.IsDir() {
		return bundle.VerifyDir(name, trusted)
	}
	f, err := safefile.Open(name) // a FIFO or a device would block or never end
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return bundle.Verify(f, trusted)
}

// printVerify lists the bundle and then says what is wrong, if anything.
// Names come from the archive, which anyone could have built, so they are
// escaped.
func printVerify(out io.Writer, name string, rep *bundle.Verification) error {
	w := &bytes.Buffer{}
	files := 0
	for _, e := range rep.Entries {
		if e.Type == "dir" {
			continue
		}
		files++
		fmt.Fprintf(w, "%-10s %10d  %s\n", e.Status, e.Size, safetext.Escape(e.Name))
	}
	if m := rep.Predicate; m != nil {
		tenant := "(none)"
		if m.Tenant != "" {
			tenant = safetext.Escape(m.Tenant)
		}
		fmt.Fprintf(w, "tenant %s, from %s to %s, host %s, written by gpusnap %s as uid %d\n",
			tenant, safetext.Escape(m.Before.ID), safetext.Escape(m.After.ID),
			safetext.Escape(m.Host.Hostname), safetext.Escape(m.GpusnapVersion), m.UID)
	}
	s := rep.Signature
	switch {
	case !s.Signed:
		fmt.Fprintln(w, "signature: none")
	case s.Trusted:
		fmt.Fprintf(w, "signature: valid, by the given key %s\n", safetext.Escape(s.PublicKey))
	case s.Valid:
		fmt.Fprintf(w, "signature: valid, by key %s (the key the statement names: pass --pub to check who signed it)\n", safetext.Escape(s.PublicKey))
	default:
		fmt.Fprintln(w, "signature: INVALID")
	}
	if rep.StoreProved {
		fmt.Fprintf(w, "store log: %d stored snapshots proved in the log at its checkpoint, each the snapshot its leaf recorded\n", len(rep.Predicate.Store.Inclusion))
	} else if m := rep.Predicate; m != nil && m.Store == nil {
		fmt.Fprintf(w, "store log: none in the bundle\n")
	} else if rep.StoreNote != "" {
		fmt.Fprintf(w, "store log: %s\n", safetext.Escape(rep.StoreNote))
	}
	if rep.Intact() {
		fmt.Fprintf(w, "%s: intact (%d files)\n", safetext.Escape(name), files)
	} else {
		for _, p := range rep.Problems {
			fmt.Fprintf(w, "%s: %s: %s\n", strings.ToUpper(p.Status), safetext.Escape(p.Name), safetext.Escape(p.Detail))
		}
		fmt.Fprintf(w, "%s: NOT INTACT (problems: %d)\n", safetext.Escape(name), len(rep.Problems))
	}
	_, err := w.WriteTo(out)
	return err
}
