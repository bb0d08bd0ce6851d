package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/metrics"
	"github.com/gpusnap/gpusnap/render"
	"github.com/gpusnap/gpusnap/session"
	"github.com/gpusnap/gpusnap/snapshot"
)

func baselineCommand() *cli.Command {
	return &cli.Command{
		Name:  "baseline",
		Usage: "capture and store the baseline of a tenant, before it runs; with --gpus, judge its GPUs as check does from the same capture",
		UsageText: "gpusnap baseline --tenant T [--gpus LIST [--allow FILE]] [--json]\n\nRun it before the tenant's job starts (a Slurm prolog, a pod's init);\n" +
			"`gpusnap diff --tenant T` after the job compares against the newest baseline of T.\n\n" +
			"With --gpus it is also the gate: the capture it stores is judged as gpusnap check --gpus LIST judges\n" +
			"one (--allow, --fail-on, --zombie-threshold, --window, --expect-watch as check has them), so no process\n" +
			"can let go of a GPU while it is checked and take it again before the baseline. The check's report\n" +
			"comes first, the id last. Exit status: 0 clean and stored; 1 not clean, stored all the same (a job\n" +
			"must not start); 2 error, or a GPU of LIST not known to be clean.\n\nExamples:\n" +
			"  id=$(gpusnap baseline --tenant \"$SLURM_JOB_ID\" --gpus \"$SLURM_JOB_GPUS\")   # a Slurm prolog\n  gpusnap baseline --tenant pod-7f3c --json | jq .id",
		Flags: slices.Concat([]cli.Flag{
			&cli.StringFlag{Name: "tenant", Usage: "the tenant `T` about to run (required)"},
			&cli.StringFlag{Name: "gpus", Usage: "the GPUs T was given, judged as check judges them: `LIST` of minor numbers (0,1 or 0-3), UUIDs and other vendors' IDs (amd:0, a PCI slot, card1) " +
				"(default: the kubelet's, when T is a pod UID it lists; else SLURM_JOB_GPUS, else CUDA_VISIBLE_DEVICES, with ROCR_VISIBLE_DEVICES, else HIP_VISIBLE_DEVICES, and ZE_AFFINITY_MASK, not judged; in a Slurm prolog without them, none); " +
				"diff --tenant T reports T's use of any other GPU"},
		}, gateFlags(), podFlags()),
		Action: action(parseBaseline, runBaseline),
	}
}

// baselineOptions are baseline's flags.
type baselineOptions struct {
	Tenant     string
	Allocation session.Allocation // where the GPUs the tenant was given come from
	// Gate judges the GPUs of --gpus from the baseline's capture. It is nil
	// without --gpus.
	Gate *checkOptions
}

func parseBaseline(c *cli.Context) (baselineOptions, error) {
	o := baselineOptions{Tenant: c.String("tenant")}
	if o.Tenant == "" {
		return o, usageError(errors.New("baseline needs --tenant T"))
	}
	if !c.IsSet("gpus") {
		o.Allocation = session.Allocation{Pods: parsePodFlags(c), Env: os.Getenv}
		return o, nil
	}
	set, err := snapshot.ParseGPUList(c.String("gpus"))
	if err != nil {
		return o, usageError(fmt.Errorf("--gpus: %w", err))
	}
	o.Allocation.Given = &set
	gate, err := parseGate(c)
	if err != nil {
		return o, err
	}
	gate.GPUs, o.Gate = &set, &gate
	return o, nil
}

// runBaseline captures and stores the baseline. With --gpus, that same
// capture is judged as check judges it, with the report first, then the
// stored id, then the check's exit status. A baseline that could not be stored
// never hides a verdict that is not clean.
func runBaseline(ctx context.Context, g globals, o baselineOptions) error {
	h := g.host()
	snap, err := h.CaptureBaseline(ctx, o.Tenant, o.Allocation)
	if err != nil {
		return err
	}
	// The gate judges before the store is opened, so the store is held for
	// the writes alone, the baseline and then the gate's result.
	var r *diff.Result
	var events eventlog.Source
	verbose := false
	if o.Gate != nil {
		r, events = checkCapture(g, h, *o.Gate, snap, &metrics.Run{})
		verbose = o.Gate.Verbose
	}
	h.Hold(true)
	_, head, storeErr := h.Put(snap)
	if r != nil {
		recordCheck(g, h, r, events, &metrics.Run{}, snap.ID)
	}
	if err := h.Release(); err != nil && storeErr == nil {
		storeErr = err
	}
	if err := printBaseline(g, snap, session.LogHead(head), r, verbose, storeErr); err != nil {
		return err
	}
	switch {
	case r != nil && r.Check.Verdict == diff.VerdictNotClean:
		return diffVerdict(g, true, storeErr)
	case storeErr != nil:
		return storeErr
	case r != nil && r.Check.Verdict == diff.VerdictUnknown:
		return fmt.Errorf("baseline %s stored; its GPUs are %s: %s", snap.ID, diff.VerdictUnknown, strings.Join(r.Check.Unchecked, "; "))
	}
	return nil
}

// printBaseline prints a baseline, the gate's result r (nil for none) and
// the id on stdout's last line, or with --json the snapshot with the store's
// log and the gate's result as its check. An id is printed only once stored.
func printBaseline(g globals, snap *snapshot.Snapshot, head *diff.LogHead, r *diff.Result, verbose bool, storeErr error) error {
	if g.JSON {
		if storeErr != nil && r == nil {
			return nil
		}
		return writeSnapshotWithLog(g.Stdout, snap, head, r)
	}
	if r != nil {
		if err := render.ResultText(g.Stdout, r, verbose); err != nil {
			return err
		}
	}
	if storeErr != nil {
		return nil
	}
	return printSnapshot(g, snap)
}

// writeSnapshotWithLog writes snap's JSON as snapshot --json does, with
// more top-level fields. store_log is the head of the store's log after the
// snapshot's leaf, which leaves the node with the prolog's output. check is
// the gate's result as check --json prints it, where r is not nil.
func writeSnapshotWithLog(w io.Writer, snap *snapshot.Snapshot, head *diff.LogHead, r *diff.Result) error {
	hold := &holdTail{w: w, n: len("}\n")}
	if err := render.SnapshotJSON(hold, snap, nil); err != nil {
		return err
	}
	if string(hold.tail) != "}\n" {
		return fmt.Errorf("snapshot JSON ends in %q, not an object", hold.tail)
	}
	logJSON, err := json.MarshalIndent(head, "  ", "  ")
	if err != nil {
		return err
	}
	if r != nil {
		var check bytes.Buffer
		if err := render.JSON(&check, r); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, ",\n  \"check\": %s", bytes.ReplaceAll(bytes.TrimSpace(check.Bytes()), []byte("\n"), []byte("\n  "))); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(w, ",\n  \"store_log\": %s\n}\n", logJSON)
	return err
}

// holdTail passes writes through to w but the last n bytes, kept in tail.
type holdTail struct {
	w    io.Writer
	n    int
	tail []byte
}

func (h *holdTail) Write(p []byte) (int, error) {
	buf := append(h.tail, p...)
	if len(buf) <= h.n {
		h.tail = buf
		return len(p), nil
	}
	if _, err := h.w.Write(buf[:len(buf)-h.n]); err != nil {
		return 0, err
	}
	h.tail = bytes.Clone(buf[len(buf)-h.n:])
	return len(p), nil
}
