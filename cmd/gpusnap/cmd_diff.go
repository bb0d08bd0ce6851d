package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/metrics"
	"github.com/gpusnap/gpusnap/ocsf"
	"github.com/gpusnap/gpusnap/session"
	"github.com/gpusnap/gpusnap/snapshot"
)

func diffCommand() *cli.Command {
	return &cli.Command{
		Name:  "diff",
		Usage: "report what a tenant left behind: diff a post capture against its baseline, or two snapshots",
		UsageText: "gpusnap diff --tenant T [options]\ngpusnap diff [options] FROM [TO]\n\n" +
			"--tenant T captures the host now, stores it (label post) and diffs it against T's newest baseline.\n" +
			"FROM and TO are stored snapshot ids or unique prefixes; without TO, FROM is diffed against a fresh\n" +
			"capture that is not stored. Exit status: 0 nothing at or above --fail-on, 1 something, 2 error.\n\n" +
			"Examples:\n  gpusnap baseline --tenant \"$SLURM_JOB_ID\"   # prolog\n" +
			"  gpusnap diff --tenant \"$SLURM_JOB_ID\" --allow /etc/gpusnap/allow.list   # epilog: drain the node on exit 1\n" +
			"  gpusnap diff --json --maps-diff 20261129-2000 20261129-2100 | jq '.findings[] | select(.severity==\"high\")'",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "tenant", Usage: "capture now and diff against the newest baseline of tenant `T`"},
			&cli.StringFlag{Name: "fail-on", Value: "medium", Usage: "exit 1 on a finding at or above `SEVERITY` (info, low, medium, high), or of a triage class listed with it (suspected_compromise,leftover_worker)"},
			&cli.StringFlag{Name: "zombie-threshold", Value: sizeText(diff.DefaultZombieThreshold), Usage: "GPU memory growth no live process accounts for, above which it is a zombie (`SIZE`: 64MiB, 1GiB, 1048576)"},
			allowFlag("expected workloads, downgraded to info"),
			&cli.BoolFlag{Name: "maps-diff", Usage: "add a unified diff of the maps of each process involved"},
			jobEndedFlag(),
			verboseFlag(),
			textfileFlag(),
			expectWatchFlag(),
		}, append(diffBundleFlags(), ocsfFlags()...)...),
		Action: action(parseDiff, runDiff),
	}
}

// diffOptions are the diff command's flags and arguments, checked before
// anything is captured.
type diffOptions struct {
	Tenant       string // --tenant captures now and diffs against its baseline
	FromID, ToID string // else two stored snapshots (ToID "" for a fresh capture)
	FailOn       diff.FailOn
	Compare      diff.Options
	Bundle       diffBundle
	Textfile     string // --textfile, where the result goes as metrics (docs/metrics.md)
	OCSF         ocsfOutput
	Verbose      bool // --verbose prints every finding in full
}

func parseDiff(c *cli.Context) (diffOptions, error) {
	o := diffOptions{Tenant: c.String("tenant"), FromID: c.Args().Get(0), ToID: c.Args().Get(1), Textfile: c.String("textfile"), Verbose: c.Bool("verbose")}
	switch n := c.NArg(); {
	case o.Tenant != "" && n > 0:
		return o, usageError(errors.New("diff takes --tenant T or snapshot ids FROM [TO], not both"))
	case o.Tenant == "" && (n < 1 || n > 2):
		return o, usageError(errors.New("diff needs --tenant T, or FROM [TO]"))
	}
	var err error
	if o.FailOn, err = diff.ParseFailOn(c.String("fail-on")); err != nil {
		return o, usageError(fmt.Errorf("--fail-on: %w", err))
	}
	if o.Compare, err = parseCompare(c); err != nil {
		return o, err
	}
	o.Compare.JobEnded = c.Bool("job-ended")
	if o.OCSF, err = parseOCSF(c); err != nil {
		return o, err
	}
	o.Bundle, err = parseDiffBundle(c)
	return o, err
}

// jobEndedFlag is --job-ended of diff and reap, saying the tenant's job has ended.
func jobEndedFlag() cli.Flag {
	return &cli.BoolFlag{Name: "job-ended", Usage: "the tenant's job has ended (a Slurm epilog, a pod's end): what its cgroup still names is a leftover, not the running job"}
}

// parseCompare reads the comparison flags diff and bundle share,
// --zombie-threshold, --allow and, on diff, --maps-diff.
func parseCompare(c *cli.Context) (opts diff.Options, err error) {
	if opts.ZombieThreshold, err = parseSize(c.String("zombie-threshold")); err != nil {
		return opts, usageError(fmt.Errorf("--zombie-threshold: %w", err))
	}
	if opts.Allow, err = loadAllow(c); err != nil {
		return opts, err
	}
	opts.MapsDiff = c.Bool("maps-diff")
	opts.ExpectWatch = c.Bool("expect-watch")
	return opts, nil
}

// runDiff diffs and reports, and records the run in --textfile's file.
func runDiff(ctx context.Context, g globals, o diffOptions) error {
	run := metrics.Run{Command: "diff"}
	err := diffAndReport(ctx, g, o, &run)
	return writeTextfile(ctx, g.Stderr, o.Textfile, run, err)
}

// diffAndReport runs the diff and prints it, filling run with what it saw.
// The store is opened once, read-write. The pair, its history, the record
// of the verdict and the bundle's proofs are read and written in one hold,
// let go before anything is printed.
func diffAndReport(ctx context.Context, g globals, o diffOptions, run *metrics.Run) error {
	host := g.host()
	host.Hold(true)
	p, r, logErr, err := diffPair(ctx, host, &o, run)
	releaseErr := host.Release()
	if err != nil {
		return err
	}
	findings := func() []ocsf.Finding { return ocsf.FromResult(r, ocsfSource(p.To.Host.Hostname, "diff")) }
	if err := o.OCSF.print(g, findings, func() error { return printResult(g, r, o.Verbose) }); err != nil {
		return err
	}
	return diffVerdict(g, r.FailedOn(o.FailOn), p.StoreErr, logErr, releaseErr, o.OCSF.appendFile(findings), o.Bundle.write(ctx, g, host, p, o.Compare, r))
}

// diffPair judges the pair the diff names, records the verdict in the
// store's log and readies the bundle. A verdict not recorded is logErr,
// said after the findings.
func diffPair(ctx context.Context, host *session.Host, o *diffOptions, run *metrics.Run) (p session.Pair, r *diff.Result, logErr, err error) {
	if o.Tenant != "" {
		p, err = host.Post(ctx, o.Tenant)
	} else {
		p, err = host.Stored(ctx, o.FromID, o.ToID)
	}
	if err != nil {
		return p, nil, nil, err
	}
	if r, err = host.Compare(p, &o.Compare); err != nil {
		return p, nil, nil, err
	}
	run.Findings, run.GPUs, run.Unchecked = r.Findings, snapshot.GPUUsage(p.To), len(r.Notes)
	logErr = host.Record("diff", r, o.Compare.Events, p.From.ID, p.To.ID)
	run.StoreLog = r.StoreLog
	o.Bundle.prepare(host, o.FailOn, p, r)
	return p, r, logErr, nil
}

// diffVerdict is the exit status of a diff that ran. The findings decide it,
// and a failure after the comparison (storing the post snapshot, writing
// the bundle) is a line on stderr that never hides them. With nothing found,
// such a failure exits 2, since the operator has something to look at.
func diffVerdict(g globals, found bool, failures ...error) error {
	failed := false
	for _, err := range failures {
		if err != nil {
			failed = true
			warn(g, err)
		}
	}
	switch {
	case found:
		return statusError{exitFindings}
	case failed:
		return statusError{exitError}
	}
	return nil
}

// sizeUnits are the suffixes --zombie-threshold takes, lower-cased. A bare
// K, M, G or T is binary, as docker and numfmt --from=iec read it.
var sizeUnits = map[string]uint64{
	"": 1, "b": 1,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}

// parseSize reads a byte count such as 1048576, 64MiB, 1GiB or 500MB.
func parseSize(text string) (uint64, error) {
	s := strings.TrimSpace(text)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	unit, ok := sizeUnits[strings.ToLower(strings.TrimSpace(s[i:]))]
	n, err := strconv.ParseUint(s[:i], 10, 64)
	if !ok || err != nil || (unit > 1 && n > ^uint64(0)/unit) {
		return 0, fmt.Errorf("%q is not a size (want bytes, or a whole number with KiB, MiB, GiB, TiB (or K, M, G, T), KB, MB, GB or TB: 64MiB, 1G, 1048576)", text)
	}
	return n * unit, nil
}

// sizeText writes a byte count as parseSize reads it, in the largest binary
// unit that divides it, such as 64MiB.
func sizeText(n uint64) string {
	for _, u := range []struct {
		name string
		size uint64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatUint(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatUint(n, 10)
}
