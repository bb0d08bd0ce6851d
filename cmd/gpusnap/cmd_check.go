package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/kubelet"
	"github.com/gpusnap/gpusnap/kubelet/podresources"
	"github.com/gpusnap/gpusnap/metrics"
	"github.com/gpusnap/gpusnap/npd"
	"github.com/gpusnap/gpusnap/ocsf"
	"github.com/gpusnap/gpusnap/session"
	"github.com/gpusnap/gpusnap/snapshot"
)

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:  "check",
		Usage: "gate before GPUs are handed out: exit 1 when one is in use or holds memory no process accounts for",
		UsageText: "gpusnap check [--gpus LIST] [--allow FILE] [--zombie-threshold SIZE] [--json]\n\n" +
			"Captures the host now (the capture is not stored, no baseline is needed; the result is a leaf of the store's log) and reports every process that\n" +
			"holds, maps or is listed on a GPU of LIST (default: every GPU and NVIDIA device) as gpu_in_use, and\n" +
			"GPU memory no live process accounts for (past the driver's own reserve) as zombie_gpu_memory. It prints\n" +
			"\"clean\", \"not clean\" or \"not known to be clean\", and what it did not check. Exit status: 0 clean,\n" +
			"1 findings at or above --fail-on, 2 error, or a GPU of LIST it could not see (no device node of it and\n" +
			"no NVML to list it) or read: not known to be clean.\n\n" +
			"Examples:\n  gpusnap check --gpus \"$SLURM_JOB_GPUS\" --require-nvml   # Slurm prolog: a failure requeues the job\n" +
			"  gpusnap check --gpus 0-3 --allow ./site-allow.list   # another list than " + diff.DefaultAllowPath + "\n  gpusnap check --gpus GPU-8f2c1e4a-... --json",
		Flags: slices.Concat([]cli.Flag{
			&cli.StringFlag{Name: "gpus", Usage: "the GPUs to check: `LIST` of minor numbers (0,1 or 0-3, as SLURM_JOB_GPUS has them), UUIDs, and other vendors' accelerators by ID (amd:0, intel:0-1, a PCI slot 0000:03:00.0, card1)"},
			textfileFlag(),
			&cli.BoolFlag{Name: "npd", Usage: "speak Node Problem Detector's custom-plugin protocol: one line of at most 80 bytes naming the worst finding; exit 0 ok, 1 problem, 2 unknown (docs/kubernetes.md)"},
			&cli.BoolFlag{Name: "idle", Usage: "check only the GPUs the kubelet has given no pod (asks --pod-resources; NVML must be read)"},
		}, gateFlags(), podFlags(), ocsfFlags()),
		Action: action(parseCheckOptions, runCheck),
	}
}

// checkOptions are check's own flags, saying what to check (--gpus,
// --allow, --zombie-threshold) and when to fail.
type checkOptions struct {
	diff.CheckOptions
	Textfile string        // --textfile, where the result goes as metrics (docs/metrics.md)
	Window   time.Duration // --window, how long the event log judged is, ending at the capture
	NPD      bool          // --npd asks for Node Problem Detector's line and exit status
	Verbose  bool          // --verbose prints every finding in full
	OCSF     ocsfOutput
	// Idle is where to ask the kubelet which GPUs no pod was given (--idle).
	// Nil checks the GPUs of --gpus.
	Idle *podresources.Options
}

// defaultCheckWindow is --window's default. A hidden use older than this is
// the diff's of its tenant to find, whose window is the tenant's job.
const defaultCheckWindow = time.Hour

// gateFlags are the flags that say how GPUs are judged, check's and
// baseline --gpus's alike, one gate whichever command runs it.
func gateFlags() []cli.Flag {
	return []cli.Flag{
		allowFlag("expected workloads (nvidia-persistenced, DCGM), downgraded to info"),
		&cli.StringFlag{Name: "zombie-threshold", Value: sizeText(diff.DefaultZombieThreshold), Usage: "GPU memory no live process accounts for, above which it is a zombie (`SIZE`)"},
		&cli.StringFlag{Name: "fail-on", Value: "medium", Usage: "exit 1 on a finding at or above `SEVERITY`, or of a triage class listed with it (suspected_compromise,leftover_worker)"},
		expectWatchFlag(),
		&cli.DurationFlag{Name: "window", Value: defaultCheckWindow, Usage: "judge the event log of the last `DUR` (hidden_device_use, transient_gpu_process, window_not_covered, gpu_busy_without_process)"},
		verboseFlag(),
	}
}

// parseGate reads gateFlags into a check's options.
func parseGate(c *cli.Context) (checkOptions, error) {
	o := checkOptions{Window: c.Duration("window"), Verbose: c.Bool("verbose")}
	o.ExpectWatch = c.Bool("expect-watch")
	var err error
	if o.Window <= 0 {
		return o, usageError(fmt.Errorf("--window %s: want a positive duration (1h, 30m)", o.Window))
	}
	if o.FailOn, err = diff.ParseFailOn(c.String("fail-on")); err != nil {
		return o, usageError(fmt.Errorf("--fail-on: %w", err))
	}
	if o.ZombieThreshold, err = parseSize(c.String("zombie-threshold")); err != nil {
		return o, usageError(fmt.Errorf("--zombie-threshold: %w", err))
	}
	if o.Allow, err = loadAllow(c); err != nil {
		return o, err
	}
	return o, nil
}

func parseCheckOptions(c *cli.Context) (checkOptions, error) {
	o, err := parseGate(c)
	if err != nil {
		return o, err
	}
	o.Textfile, o.NPD = c.String("textfile"), c.Bool("npd")
	if o.OCSF, err = parseOCSF(c); err != nil {
		return o, err
	}
	if o.NPD && (o.OCSF.Stdout || lookup(c, "json", (*cli.Context).Bool)) {
		return o, usageError(errors.New("--npd prints NPD's one line: it cannot be combined with --json or --format ocsf"))
	}
	if c.Bool("idle") {
		if c.IsSet("gpus") {
			return o, usageError(errors.New("--idle picks the GPUs to check: it cannot be combined with --gpus"))
		}
		idle := podOptions(c)
		o.Idle = &idle
	}
	if o.GPUs, err = gpuListFlag(c, "gpus", "check"); err != nil {
		return o, err
	}
	return o, nil
}

// runCheck captures the host, checks it and reports. It exits 1 on findings
// at or above --fail-on, else 2 when a GPU asked for could not be read.
func runCheck(ctx context.Context, g globals, o checkOptions) error {
	run := metrics.Run{Command: "check"}
	r, host, err := checkHost(ctx, g, o, &run)
	if err == nil {
		err = reportCheck(g, o, r, host)
	} else if o.NPD {
		// NPD reads stdout only, so a check that never ran says why there too.
		fmt.Fprintln(g.Stdout, npd.Unknown(err))
	}
	return writeTextfile(ctx, g.Stderr, o.Textfile, run, err)
}

// checkSince is where check's window of the event log begins, --window
// before the capture but not before the first watch started since boot. No
// watch could see what came before it, so a window reaching back over it
// would fail every check after each boot. A host with no watch since boot
// keeps the whole window, and its gap.
func checkSince(g globals, snap *snapshot.Snapshot, window time.Duration) time.Time {
	since := snap.Host.CaptureStart.Add(-window)
	if boot := snap.Host.BootTime; !boot.IsZero() && since.Before(boot) {
		if t, ok := eventlog.FirstWatchStart(eventlog.JournalDir(g.DB), boot); ok && t.After(since) && t.Before(snap.Host.CaptureStart) {
			since = t
		}
	}
	return since
}

// checkHost captures the host and checks it, filling run with what it saw.
// It returns the host's name, as the capture read it.
func checkHost(ctx context.Context, g globals, o checkOptions, run *metrics.Run) (*diff.Result, string, error) {
	// The capture is not stored. Who a process is matters only where it
	// uses a GPU, and the others are read for what they hold and map alone.
	opts := g.captureOptions(snapshot.LabelSnapshot, "")
	opts.GPUIdentityOnly = true
	snap, err := capture.Capture(ctx, opts)
	if err != nil {
		return nil, "", err
	}
	if o.Idle != nil {
		if o.GPUs, err = idleGPUs(ctx, *o.Idle, snap); err != nil {
			return nil, "", err
		}
	}
	return judgeCapture(g, o, snap, run), snap.Host.Hostname, nil
}

// judgeCapture checks snap as the gate does, with the event log of the
// window before it, filling run with what it saw, and records the result
// in the store's log beside the snapshots ids (a baseline stored of snap).
func judgeCapture(g globals, o checkOptions, snap *snapshot.Snapshot, run *metrics.Run, ids ...string) *diff.Result {
	h := g.host()
	r, events := checkCapture(g, h, o, snap, run)
	recordCheck(g, h, r, events, run, ids...)
	return r
}

// checkCapture checks snap with the event log of the window before it, and
// returns the result and the log it read.
func checkCapture(g globals, h *session.Host, o checkOptions, snap *snapshot.Snapshot, run *metrics.Run) (*diff.Result, eventlog.Source) {
	o.Since = checkSince(g, snap, o.Window)
	o.Events, o.LogProblems = h.Window(o.Since, snap)
	r := diff.Check(snap, o.CheckOptions)
	run.Findings, run.GPUs, run.Unchecked = r.Findings, snapshot.GPUUsage(snap), len(r.Notes)+len(r.Check.Unchecked)
	return r, o.Events
}

// recordCheck records a check's result in the store's log. The gate's
// verdict stands without the log, so a failure is said, not fatal.
func recordCheck(g globals, h *session.Host, r *diff.Result, events eventlog.Source, run *metrics.Run, ids ...string) {
	if err := h.Record("check", r, events, ids...); err != nil {
		warn(g, err)
	}
	run.StoreLog = r.StoreLog
}

// reportCheck prints a check's result and returns its exit status.
// A finding not appended to --ocsf-file is a line on stderr beside the
// verdict, and exit 2 beside a clean one, since the result asked for is
// missing.
func reportCheck(g globals, o checkOptions, r *diff.Result, host string) error {
	findings := func() []ocsf.Finding { return ocsf.FromResult(r, ocsfSource(host, "check")) }
	err := o.OCSF.print(g, findings, func() error {
		if o.NPD {
			_, err := fmt.Fprintln(g.Stdout, npd.Line(r, o.FailOn))
			return err
		}
		return printResult(g, r, o.Verbose)
	})
	if err != nil {
		return err
	}
	if err := o.OCSF.appendFile(findings); err != nil {
		if err := diffVerdict(g, r.FailedOn(o.FailOn), err); err != nil {
			return err
		}
	}
	switch r.Check.Verdict {
	case diff.VerdictNotClean:
		return statusError{exitFindings}
	case diff.VerdictUnknown:
		return fmt.Errorf("check: %s: %s", diff.VerdictUnknown, strings.Join(r.Check.Unchecked, "; "))
	}
	return nil
}

// idleGPUs are the GPUs of snap that the kubelet has given no pod, by UUID.
// Which GPUs those are is not known without NVML or the kubelet, and that
// is an error, never a check of nothing.
func idleGPUs(ctx context.Context, o podresources.Options, snap *snapshot.Snapshot) (*snapshot.GPUSet, error) {
	if why := snap.NVML.Unavailable; why != "" {
		return nil, fmt.Errorf("--idle: NVML was not read (%s), so the GPUs are not known", why)
	}
	// A pod whose UID is not known still names its GPUs, which is all --idle needs.
	alloc, err := podresources.Read(ctx, o)
	if alloc == nil {
		return nil, fmt.Errorf("--idle: %w", err)
	}
	// A pod whose GPUs are not known may hold any GPU, so none is known idle.
	if why := alloc.NotUnderstood(); len(why) > 0 {
		return nil, fmt.Errorf("--idle: %w: %s", kubelet.ErrNotUnderstood, strings.Join(why, "; "))
	}
	set := &snapshot.GPUSet{}
	for _, g := range snapshot.GPUUsage(snap) {
		if g.UUID == "" {
			return nil, fmt.Errorf("--idle: NVML gave GPU %d no UUID, so its pods are not known", g.Index)
		}
		if g.MinorNumber == nil && alloc.ByMinor() {
			return nil, fmt.Errorf("--idle: NVML gave GPU %d no minor number, so the DRA claims on it are not known", g.Index)
		}
		if len(alloc.PodsOf(&g)) == 0 {
			set.UUIDs = append(set.UUIDs, g.UUID)
		}
	}
	return set, nil
}

// gpuListFlag reads the GPU list flag name (check --gpus, ps --gpu) as
// snapshot.ParseGPUList does, nil where it is not given. An empty list is a
// usage error. It is a script's unset variable, and to check or show no GPU
// would pass. verb says what leaving the flag out does to every GPU.
func gpuListFlag(c *cli.Context, name, verb string) (*snapshot.GPUSet, error) {
	if !c.IsSet(name) {
		return nil, nil
	}
	set, err := snapshot.ParseGPUList(c.String(name))
	if err != nil {
		return nil, usageError(fmt.Errorf("--%s: %w", name, err))
	}
	if len(set.Minors)+len(set.UUIDs) == 0 {
		return nil, usageError(fmt.Errorf("--%s is empty (leave it out to %s every GPU)", name, verb))
	}
	return &set, nil
}
