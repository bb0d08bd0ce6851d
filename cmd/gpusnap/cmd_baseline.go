package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/render"
	"github.com/gpusnap/gpusnap/session"
	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
)

func baselineCommand() *cli.Command {
	return &cli.Command{
		Name:  "baseline",
		Usage: "capture and store the baseline of a tenant, before it runs",
		UsageText: "gpusnap baseline --tenant T [--json]\n\nRun it before the tenant's job starts (a Slurm prolog, a pod's init);\n" +
			"`gpusnap diff --tenant T` after the job compares against the newest baseline of T.\n\nExamples:\n" +
			"  id=$(gpusnap baseline --tenant \"$SLURM_JOB_ID\")\n  gpusnap baseline --tenant pod-7f3c --json | jq .id",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "tenant", Usage: "the tenant `T` about to run (required)"},
			&cli.StringFlag{Name: "gpus", Usage: "the GPUs T was given: `LIST` of minor numbers (0,1 or 0-3) and UUIDs " +
				"(default: the kubelet's, when T is a pod UID it lists; else SLURM_JOB_GPUS, else CUDA_VISIBLE_DEVICES; in a Slurm prolog without them, none); " +
				"diff --tenant T reports T's use of any other GPU"},
		}, podFlags()...),
		Action: action(parseBaseline, runBaseline),
	}
}

// baselineOptions are baseline's flags.
type baselineOptions struct {
	Tenant     string
	Allocation session.Allocation // where the GPUs the tenant was given come from
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
	return o, nil
}

func runBaseline(ctx context.Context, g globals, o baselineOptions) error {
	snap, head, err := g.host().Baseline(ctx, o.Tenant, o.Allocation)
	if err != nil {
		return err
	}
	if !g.JSON {
		return printSnapshot(g, snap)
	}
	return writeSnapshotWithLog(g.Stdout, snap, head)
}

// writeSnapshotWithLog writes snap's JSON as snapshot --json does, with one
// more top-level field, store_log: the head of the store's log after the
// snapshot's leaf, which leaves the node with the prolog's output.
func writeSnapshotWithLog(w io.Writer, snap *snapshot.Snapshot, head store.TreeHead) error {
	hold := &holdTail{w: w, n: len("}\n")}
	if err := render.SnapshotJSON(hold, snap, nil); err != nil {
		return err
	}
	if string(hold.tail) != "}\n" {
		return fmt.Errorf("snapshot JSON ends in %q, not an object", hold.tail)
	}
	logJSON, err := json.MarshalIndent(diff.LogHead{Origin: head.Origin, Size: head.Size, Root: base64.StdEncoding.EncodeToString(head.Root)}, "  ", "  ")
	if err != nil {
		return err
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
