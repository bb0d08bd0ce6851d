package main

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/bundle"
	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/safefile"
	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/render"
	"github.com/gpusnap/gpusnap/session"
	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
	"github.com/gpusnap/gpusnap/store/tlog"
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
// only after the diff: a bundle that cannot be written must not keep a dirty
// host from being reported, as it would when an epilog runs a second time
// and finds its bundle already there.
type diffBundle struct {
	path    string
	always  bool
	force   bool
	signKey string
	opts    bundleOpts
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

// write writes the bundle of a diff when asked and warranted, and says so on
// stderr: stdout holds the diff. Its error is a line on stderr after the
// findings, never in their place.
func (b diffBundle) write(ctx context.Context, g globals, failOn diff.FailOn, from, to *snapshot.Snapshot, opts diff.Options, r *diff.Result) error {
	if b.path == "" || !(b.always || r.FailedOn(failOn)) {
		return nil
	}
	if err := b.opts.readFiles(b.path, b.force, b.signKey); err != nil {
		return err
	}
	if !opts.MapsDiff {
		// The bundle holds every involved process's maps diff, printed or not.
		opts.MapsDiff = true
		r = diff.Compare(from, to, opts)
	}
	w, err := writeBundle(ctx, g, b.path, b.opts, from, to, r, opts)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(g.Stderr, w)
	return err
}

// bundleOptions are the bundle command's flags and arguments.
type bundleOptions struct {
	Tenant       string // --tenant: its newest baseline and post snapshot
	FromID, ToID string // else two stored snapshots
	Output       string // -o FILE
	Force        bool
	SignKey      string // --sign-key FILE
	Compare      diff.Options
	Write        bundleOpts // --tenant-start, --tenant-end; the key once read
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
	var p session.Pair
	var err error
	if o.Tenant != "" {
		p, err = host.Latest(ctx, o.Tenant)
	} else {
		p, err = host.Stored(ctx, o.FromID, o.ToID)
	}
	if err != nil {
		return err
	}
	r, err := host.Compare(p, &o.Compare)
	if err != nil {
		return err
	}
	w, err := writeBundle(ctx, g, o.Output, o.Write, p.From, p.To, r, o.Compare)
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

// bundleOpts are bundleFlags, read and checked before any capture or store
// access, so a bad key or output path fails fast.
type bundleOpts struct {
	force                  bool
	signKey                []byte
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

// written describes a bundle just written, for the line or JSON that says so.
type written struct {
	File    string       `json:"file"`
	SHA256  string       `json:"sha256"`
	Bag     string       `json:"bag"` // the tarball's one directory
	From    string       `json:"from"`
	To      string       `json:"to"`
	Tenant  string       `json:"tenant,omitempty"`
	Files   int          `json:"files"`
	Summary diff.Summary `json:"summary"`
	Signer  string       `json:"signer,omitempty"` // the signing key, base64
	// StoreProved: the bundle carries the store log's checkpoint and the
	// inclusion of its stored snapshots.
	StoreProved bool `json:"store_proved"`
}

func (w written) String() string {
	signed := "unsigned"
	if w.Signer != "" {
		signed = "signed by " + w.Signer
	}
	return fmt.Sprintf("wrote %s: %s to %s, findings: %d, %s, sha256 %s",
		safetext.Escape(w.File), safetext.Escape(w.From), safetext.Escape(w.To), w.Summary.Total, signed, w.SHA256)
}

// writeBundle writes the bundle of a diff to path.
// window carries what the bundle shows of the time between the snapshots:
// the kernel log and the watch's events.
func writeBundle(ctx context.Context, g globals, path string, o bundleOpts, from, to *snapshot.Snapshot, res *diff.Result, window diff.Options) (written, error) {
	in := bundle.Input{
		Before: from, After: to, Result: res, KernelLog: window.KernelLog, Events: window.Events,
		Version: capture.Version, UID: os.Getuid(),
		TenantStart: o.tenantStart, TenantEnd: o.tenantEnd,
		SignKey: o.signKey,
	}
	var err error
	if in.Store, err = storeEvidence(g, o.signKey, from.ID, to.ID); err != nil {
		// The bundle goes out without the log's proofs, and says so.
		warn(g, fmt.Errorf("bundle: the store's log is not in the bundle: %w", err))
	}
	m, err := bundle.WriteFile(ctx, path, in, o.force)
	if err != nil {
		return written{}, fmt.Errorf("bundle: %w", err)
	}
	sum, err := fileSHA256(path)
	if err != nil {
		return written{}, fmt.Errorf("bundle: %w", err)
	}
	p := m.Predicate
	w := written{File: path, SHA256: sum, Bag: m.Bag, From: from.ID, To: to.ID, Tenant: p.Tenant, Files: m.Files, Summary: res.Summary, StoreProved: p.Store != nil}
	if p.Signer != nil {
		w.Signer = p.Signer.PublicKey
	}
	return w, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// storeEvidence proves the bundle's snapshots in the store's log: the log's
// checkpoint (signed with key, when given) and each stored snapshot's
// inclusion at it; a snapshot not stored (a TO captured for the bundle) is
// named as such.
func storeEvidence(g globals, key ed25519.PrivateKey, ids ...string) (*bundle.StoreEvidence, error) {
	ev := &bundle.StoreEvidence{}
	var head tlog.TreeHead
	err := readStore(g, func(st *store.Store) error {
		var err error
		if head, err = st.Head(); err != nil {
			return err
		}
		for _, id := range ids {
			p, err := st.Inclusion(id)
			switch {
			case err != nil && !store.IsNotInLog(err):
				return err
			case err != nil:
				ev.NotStored = append(ev.NotStored, id)
			default:
				ev.Inclusion = append(ev.Inclusion, p...)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(ev.Inclusion) > 0 {
		head = ev.Inclusion[0].Head // the proofs' head: a write since Head is not in them
	}
	note, err := checkpointText(head, key)
	if err != nil {
		return nil, err
	}
	ev.Checkpoint = string(note)
	return ev, nil
}
