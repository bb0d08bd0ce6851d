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

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/kubelet"
	"github.com/gpusnap/gpusnap/render"
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
	Allocation *snapshot.GPUSet // the GPUs the tenant was given; nil when unknown
	// Pods is where to ask the kubelet for a pod tenant's GPUs, when --gpus
	// is not given; nil on no Kubernetes node.
	Pods *kubelet.Options
}

func parseBaseline(c *cli.Context) (baselineOptions, error) {
	o := baselineOptions{Tenant: c.String("tenant")}
	if o.Tenant == "" {
		return o, usageError(errors.New("baseline needs --tenant T"))
	}
	var err error
	o.Allocation, err = allocation(c)
	if !c.IsSet("gpus") {
		o.Pods = parsePodFlags(c)
	}
	return o, err
}

func runBaseline(ctx context.Context, g globals, o baselineOptions) error {
	snap, head, err := takeBaseline(ctx, g, o)
	if err != nil {
		return err
	}
	if !g.JSON {
		return printSnapshot(g, snap)
	}
	return writeSnapshotWithLog(g.Stdout, snap, head)
}

// takeBaseline captures the host and stores it as the tenant's baseline,
// with the allocation o names or the kubelet's, and returns it with the
// head of the store's log after it.
func takeBaseline(ctx context.Context, g globals, o baselineOptions) (*snapshot.Snapshot, store.TreeHead, error) {
	snap, err := captureHost(ctx, g, snapshot.LabelBaseline, o.Tenant)
	if err != nil {
		return nil, store.TreeHead{}, err
	}
	snap.Allocation = o.Allocation
	if why := snap.NVML.Unavailable; why != "" {
		if sign := capture.NVIDIADriverSign(snap.Host.ProcRoot); sign != "" {
			fmt.Fprintf(g.Stderr, "gpusnap: NVML was not read (%s) though %s shows an NVIDIA driver: GPU memory will not be compared against this baseline (--require-nvml makes this an error)\n",
				safetext.Escape(why), safetext.Escape(sign))
		}
	}
	// A pod the kubelet lists: the GPUs it was given, before the environment's.
	if pods := podAllocations(ctx, g, o.Pods); pods != nil {
		set, ok, err := pods.GPUsOf(o.Tenant, snap.NVML.Devices)
		if err != nil {
			return nil, store.TreeHead{}, err
		}
		switch {
		case ok:
			snap.Allocation = set
		case snap.Allocation == nil:
			fmt.Fprintf(g.Stderr, "gpusnap: the kubelet lists no GPU of pod %s and does not run it (yet): the baseline records no allocation\n", safetext.Escape(o.Tenant))
		}
	}
	head, err := storeSnapshot(g, snap)
	return snap, head, err
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

// allocation reads the GPUs the tenant was given: --gpus, else the
// environment a Slurm prolog is given; nil when neither says.
func allocation(c *cli.Context) (*snapshot.GPUSet, error) {
	if c.IsSet("gpus") {
		set, err := snapshot.ParseGPUList(c.String("gpus"))
		if err != nil {
			return nil, usageError(fmt.Errorf("--gpus: %w", err))
		}
		return &set, nil
	}
	set, _, err := snapshot.AllocationFromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("allocation from the environment: %w (give --gpus)", err)
	}
	return set, nil
}
