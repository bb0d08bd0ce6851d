package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/metrics"
	"github.com/gpusnap/gpusnap/snapshot"
)

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:  "check",
		Usage: "gate before GPUs are handed out: exit 1 when one is in use or holds memory no process accounts for",
		UsageText: "gpusnap check [--gpus LIST] [--allow FILE] [--zombie-threshold SIZE] [--json]\n\n" +
			"Captures the host now (the capture is not stored, no baseline is needed; the result is a leaf of the store's log) and reports every process that\n" +
			"holds, maps or is listed on a GPU of LIST (default: every GPU and NVIDIA device) as gpu_in_use, and\n" +
			"GPU memory no live process accounts for as zombie_gpu_memory. Exit status: 0 clean, 1 findings at or\n" +
			"above --fail-on, 2 error, or a GPU of LIST that could not be read (not known to be clean).\n\n" +
			"Examples:\n  gpusnap check --gpus \"$SLURM_JOB_GPUS\" --require-nvml   # Slurm prolog: a failure requeues the job\n" +
			"  gpusnap check --gpus 0-3 --allow /etc/gpusnap/allow\n  gpusnap check --gpus GPU-8f2c1e4a-... --json",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "gpus", Usage: "the GPUs to check: `LIST` of minor numbers (0,1 or 0-3, as SLURM_JOB_GPUS has them) and UUIDs"},
			&cli.StringFlag{Name: "allow", Usage: "expected workloads (nvidia-persistenced, DCGM), downgraded to info (`FILE`; format in docs/diff.md)"},
			&cli.StringFlag{Name: "zombie-threshold", Value: sizeText(diff.DefaultZombieThreshold), Usage: "GPU memory no live process accounts for, above which it is a zombie (`SIZE`)"},
			&cli.StringFlag{Name: "fail-on", Value: "medium", Usage: "exit 1 on a finding at or above `SEVERITY`"},
			textfileFlag(),
			expectWatchFlag(),
			&cli.DurationFlag{Name: "window", Value: defaultCheckWindow, Usage: "judge the event log of the last `DUR` (hidden_device_use, window_not_covered)"},
		},
		Action: action(parseCheckOptions, runCheck),
	}
}

// checkOptions are check's own flags: what to check (--gpus, --allow,
// --zombie-threshold) and when to fail.
type checkOptions struct {
	diff.CheckOptions
	FailOn   diff.Severity
	Textfile string        // --textfile: the result as metrics (docs/metrics.md)
	Window   time.Duration // --window: the event log judged ends at the capture and is this long
}

// defaultCheckWindow is --window's default: a hidden use older than this is
// the diff's of its tenant to find, whose window is the tenant's job.
const defaultCheckWindow = time.Hour

func parseCheckOptions(c *cli.Context) (checkOptions, error) {
	o := checkOptions{Textfile: c.String("textfile"), Window: c.Duration("window")}
	o.ExpectWatch = c.Bool("expect-watch")
	var err error
	if o.Window <= 0 {
		return o, usageError(fmt.Errorf("--window %s: want a positive duration (1h, 30m)", o.Window))
	}
	if c.IsSet("gpus") {
		set, err := snapshot.ParseGPUList(c.String("gpus"))
		if err != nil {
			return o, usageError(fmt.Errorf("--gpus: %w", err))
		}
		if len(set.Minors)+len(set.UUIDs) == 0 {
			// An empty list is a script's unset variable: checking nothing would pass.
			return o, usageError(fmt.Errorf("--gpus is empty (leave it out to check every GPU)"))
		}
		o.GPUs = &set
	}
	if o.FailOn, err = diff.ParseFailOn(c.String("fail-on")); err != nil {
		return o, usageError(fmt.Errorf("--fail-on: %w", err))
	}
	if o.ZombieThreshold, err = parseSize(c.String("zombie-threshold")); err != nil {
		return o, usageError(fmt.Errorf("--zombie-threshold: %w", err))
	}
	if path := c.String("allow"); path != "" {
		if o.Allow, err = diff.LoadAllow(path); err != nil {
			return o, err
		}
	}
	return o, nil
}

// runCheck captures the host, checks it and reports: exit 1 on findings at
// or above --fail-on, else exit 2 when a GPU asked for could not be read.
func runCheck(ctx context.Context, g globals, o checkOptions) error {
	run := metrics.Run{Command: "check"}
	err := checkAndReport(ctx, g, o, &run)
	return writeTextfile(ctx, g.Stderr, o.Textfile, run, err)
}

// checkSince is where check's window of the event log begins: --window
// before the capture, but not before the first watch started since boot.
// What came before that watch no watch could see (docs/threat-model.md:
// descriptors older than the watch), and a window reaching back over it
// would fail every check for --window after each boot. A host whose watch
// has not started since boot keeps the whole window, and its gap.
func checkSince(g globals, snap *snapshot.Snapshot, window time.Duration) time.Time {
	since := snap.Host.CaptureStart.Add(-window)
	if boot := snap.Host.BootTime; !boot.IsZero() && since.Before(boot) {
		if t, ok := eventlog.FirstWatchStart(eventlog.JournalDir(g.DB), boot); ok && t.After(since) && t.Before(snap.Host.CaptureStart) {
			since = t
		}
	}
	return since
}

// checkAndReport checks the host and prints it, filling run with what it saw.
func checkAndReport(ctx context.Context, g globals, o checkOptions, run *metrics.Run) error {
	snap, err := snapshot.Capture(ctx, g.captureOptions(snapshot.LabelSnapshot, ""))
	if err != nil {
		return err
	}
	o.Since = checkSince(g, snap, o.Window)
	o.Events, o.LogProblems = windowEvents(g, o.Since, snap)
	r := diff.Check(snap, o.CheckOptions)
	run.Findings, run.GPUs, run.Unchecked = r.Findings, snapshot.GPUUsage(snap), len(r.Notes)+len(r.Check.Unchecked)
	if err := recordResult(g, "check", r, run); err != nil {
		// The gate's verdict stands without the log: said, not fatal.
		warn(g, err)
	}
	if err := printResult(g, r); err != nil {
		return err
	}
	if r.Failed(o.FailOn) {
		return statusError{exitFindings}
	}
	if len(r.Check.Unchecked) > 0 {
		return fmt.Errorf("check: not known to be clean: %s", strings.Join(r.Check.Unchecked, "; "))
	}
	return nil
}
