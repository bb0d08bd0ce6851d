package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/bundle"
	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/safefile"
	"github.com/gpusnap/gpusnap/render"
	"github.com/gpusnap/gpusnap/session"
)

func bundleCommand() *cli.Command {
	return &cli.Command{
		Name:  "bundle",
		Usage: "write an evidence bundle: both snapshots, the findings, reports and the kernel's own text, hashed and optionally signed",
		UsageText: "gpusnap bundle --tenant T -o FILE [--sign-key KEY] [--force]\n" +
			"gpusnap bundle FROM TO -o FILE [--sign-key KEY] [--force]\n\n" +
			"With --tenant: T's newest baseline against T's newest post snapshot taken after it (the one\n" +
			"`gpusnap diff --tenant T` stored); when there is none, a post snapshot is captured now and stored.\n" +
			"With FROM TO: two stored snapshots, by id or unique prefix.\n" +
			"The file is created 0600 and never written through a symbolic link or over an existing file\n" +
			"(--force replaces a file, atomically). Check it with `gpusnap verify FILE`. docs/bundle.md has the layout.\n\n" +
			"Examples:\n  gpusnap bundle --tenant \"$SLURM_JOB_ID\" -o /var/lib/gpusnap/incident-$SLURM_JOB_ID.tar.gz --sign-key /etc/gpusnap/bundle.key\n" +
			"  gpusnap bundle 20261129-1000 20261129-1200 -o incident.tar.gz",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "tenant", Usage: "bundle tenant `T`'s newest baseline and post snapshot"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the bundle to `FILE` (required)"},
			&cli.StringFlag{Name: "zombie-threshold", Value: sizeText(diff.DefaultZombieThreshold), Usage: "as for gpusnap diff (`SIZE`)"},
			allowFlag("as for gpusnap diff: expected workloads, downgraded to info"),
		}, bundleFlags()...),
		Action: action(parseBundle, runBundle),
	}
}

// bundleFlags are the flags of every command that writes a bundle (bundle,
// and diff with --bundle).
func bundleFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "sign-key", Usage: "sign the statement (a DSSE envelope) and the store's checkpoint with the ed25519 private `KEY` (from gpusnap keygen)"},
		&cli.BoolFlag{Name: "force", Usage: "replace an existing bundle file (never a symbolic link)"},
		&cli.StringFlag{Name: "tenant-start", Usage: "when the tenant's job started (RFC 3339 `TIME`), for the report's time line"},
		&cli.StringFlag{Name: "tenant-end", Usage: "when the tenant's job ended (RFC 3339 `TIME`), for the report's time line"},
	}
}

// diffBundleFlags are what `gpusnap diff` takes to write a bundle.
func diffBundleFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "bundle", Usage: "write an evidence bundle to `FILE` when the diff finds something at or above --fail-on (docs/bundle.md)"},
		&cli.BoolFlag{Name: "bundle-always", Usage: "with --bundle: write the bundle whatever the diff finds"},
	}, bundleFlags()...)
}

// diffBundle is diff's --bundle. Its flags are read before anything is
// captured, but its files (the output path, the signing key) are touched
// only after the diff. A bundle that cannot be written must not keep a dirty
// host from being reported, as it would when an epilog runs a second time
// and finds its bundle already there.
type diffBundle struct {
	path    string
	always  bool
	force   bool
	signKey string
	opts    bundleOpts
	// prepare sets whether the diff asks for the bundle, and the bundle to
	// write or why it cannot be.
	wanted bool
	bundle session.Bundle
	err    error
}

func parseDiffBundle(c *cli.Context) (diffBundle, error) {
	b := diffBundle{path: c.String("bundle"), always: c.Bool("bundle-always"), force: c.Bool("force"), signKey: c.String("sign-key")}
	if b.path == "" {
		for _, name := range []string{"bundle-always", "sign-key", "force", "tenant-start", "tenant-end"} {
			if c.IsSet(name) {
				return b, usageError(fmt.Errorf("--%s needs --bundle FILE", name))
			}
		}
		return b, nil
	}
	var err error
	b.opts, err = bundleTimes(c)
	return b, err
}

// prepare readies the bundle of a diff when asked and warranted. It reads
// its files and gathers the store's proofs in the hold of the store that
// judged the pair, before the hold is let go.
func (b *diffBundle) prepare(h *session.Host, failOn diff.FailOn, p session.Pair, r *diff.Result) {
	if b.path == "" || !(b.always || r.FailedOn(failOn)) {
		return
	}
	b.wanted = true
	if b.err = b.opts.readFiles(b.path, b.force, b.signKey); b.err == nil {
		b.bundle = b.opts.bundle(b.path)
		h.Prove(&b.bundle, p.From, p.To)
	}
}

// write writes the bundle prepare readied, and says so on stderr, as stdout
// holds the diff. Its error is a line on stderr after the findings, never
// in their place.
func (b *diffBundle) write(ctx context.Context, g globals, h *session.Host, p session.Pair, opts diff.Options, r *diff.Result) error {
	if !b.wanted || b.err != nil {
		return b.err
	}
	if !opts.MapsDiff {
		// The bundle holds every involved process's maps diff, printed or not.
		opts.MapsDiff = true
		r = diff.Compare(p.From, p.To, opts)
	}
	w, err := h.WriteBundle(ctx, b.bundle, p.From, p.To, r, opts)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(g.Stderr, w)
	return err
}

// bundleOptions are the bundle command's flags and arguments.
type bundleOptions struct {
	Tenant       string // --tenant, whose newest baseline and post snapshot are the pair
	FromID, ToID string // else two stored snapshots
	Output       string // -o FILE
	Force        bool
	SignKey      string // --sign-key FILE
	Compare      diff.Options
	Write        bundleOpts // --tenant-start, --tenant-end and the key once read
}

func parseBundle(c *cli.Context) (bundleOptions, error) {
	o := bundleOptions{Tenant: c.String("tenant"), Output: c.String("output"), Force: c.Bool("force"), SignKey: c.String("sign-key")}
	switch {
	case o.Output == "":
		return o, usageError(errors.New("bundle needs -o FILE"))
	case o.Tenant != "" && c.NArg() != 0:
		return o, usageError(errors.New("bundle takes --tenant T or FROM TO, not both"))
	case o.Tenant == "" && c.NArg() != 2:
		return o, usageError(fmt.Errorf("bundle needs --tenant T or two snapshot ids FROM TO, got %d arguments", c.NArg()))
	}
	o.FromID, o.ToID = c.Args().Get(0), c.Args().Get(1)
	var err error
	if o.Write, err = bundleTimes(c); err != nil {
		return o, err
	}
	o.Compare, err = parseCompare(c)
	o.Compare.MapsDiff = true // the bundle holds every involved process's maps diff
	return o, err
}

func runBundle(ctx context.Context, g globals, o bundleOptions) error {
	// A path the bundle cannot be written to, or a bad key, is refused before
	// a post snapshot is captured and stored for nothing.
	if err := o.Write.readFiles(o.Output, o.Force, o.SignKey); err != nil {
		return err
	}
	host := g.host()
	host.Hold(false)
	b := o.Write.bundle(o.Output)
	p, r, err := bundlePair(ctx, host, o, &b)
	if rerr := host.Release(); err == nil {
		err = rerr
	}
	if err != nil {
		return err
	}
	w, err := host.WriteBundle(ctx, b, p.From, p.To, r, o.Compare)
	if err != nil {
		return err
	}
	if g.JSON {
		err = render.JSON(g.Stdout, w)
	} else {
		_, err = fmt.Fprintln(g.Stdout, w)
	}
	if err == nil && p.StoreErr != nil {
		// The bundle holds the post snapshot the store could not.
		err = p.StoreErr
	}
	return err
}

// bundlePair judges the pair the bundle command names and proves it in the
// store's log for b, all in host's hold of the store. The bundle is written
// once the hold is let go.
func bundlePair(ctx context.Context, host *session.Host, o bundleOptions, b *session.Bundle) (session.Pair, *diff.Result, error) {
	var p session.Pair
	var err error
	if o.Tenant != "" {
		p, err = host.Latest(ctx, o.Tenant)
	} else {
		p, err = host.Stored(ctx, o.FromID, o.ToID)
	}
	if err != nil {
		return p, nil, err
	}
	r, err := host.Compare(p, &o.Compare)
	if err != nil {
		return p, nil, err
	}
	host.Prove(b, p.From, p.To)
	return p, r, nil
}

// bundleOpts are bundleFlags, read and checked before any capture or store
// access, so a bad key or output path fails fast.
type bundleOpts struct {
	force                  bool
	signKey                ed25519.PrivateKey
	tenantStart, tenantEnd time.Time
}

// readFiles checks that the bundle can be written to path and reads the
// signing key, when there is one.
func (o *bundleOpts) readFiles(path string, force bool, signKey string) error {
	o.force = force
	if err := safefile.CheckTarget(path, force); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if signKey != "" {
		key, err := bundle.ReadPrivateKey(signKey)
		if err != nil {
			return err
		}
		o.signKey = key
	}
	return nil
}

// bundle is the bundle to write to path.
func (o bundleOpts) bundle(path string) session.Bundle {
	return session.Bundle{Path: path, Force: o.force, SignKey: o.signKey, TenantStart: o.tenantStart, TenantEnd: o.tenantEnd}
}

// bundleTimes reads --tenant-start and --tenant-end.
func bundleTimes(c *cli.Context) (bundleOpts, error) {
	var o bundleOpts
	for name, t := range map[string]*time.Time{"tenant-start": &o.tenantStart, "tenant-end": &o.tenantEnd} {
		if s := c.String(name); s != "" {
			v, err := time.Parse(time.RFC3339, s)
			if err != nil {
				return o, usageError(fmt.Errorf("--%s: %w", name, err))
			}
			*t = v
		}
	}
	return o, nil
}
