package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/kubelet"
	"github.com/gpusnap/gpusnap/kubelet/podresources"
	"github.com/gpusnap/gpusnap/render"
	"github.com/gpusnap/gpusnap/snapshot"
)

func psCommand() *cli.Command {
	return &cli.Command{
		Name:  "ps",
		Usage: "live triage: every process that uses an NVIDIA device now",
		UsageText: "gpusnap ps [--wide] [--json]\n\nExamples:\n" +
			"  gpusnap ps\n" +
			"  gpusnap ps --wide   # every column, none cut: holders, mappings, package, SHA-256\n" +
			"  gpusnap ps --json | jq '.processes[] | {pid, exe, container_id}'\n" +
			"  gpusnap ps --proc-root fixtures/proc/gpuhost --no-nvml\n\n" +
			"On a Kubernetes node (the kubelet's pod-resources socket is there), each GPU shows the pods given it,\n" +
			"and a process of another pod that uses it.",
		Flags: append(podFlags(), &cli.BoolFlag{Name: "wide", Aliases: []string{"w"},
			Usage: "show every column (holders, mappings, package, SHA-256) and cut none; without it the table fits 120 columns, a cut value ending in …"}),
		Action: action(parsePs, runPs),
	}
}

// psReport is what `gpusnap ps --json` prints: the processes that map or
// hold an NVIDIA device, with the host facts and scan counts behind them.
type psReport struct {
	Host      snapshot.Host      `json:"host"`
	Scan      snapshot.Scan      `json:"scan"`
	Processes []render.PsProcess `json:"processes"`
	// GPUs is NVML's view of each GPU joined with /proc (see docs/nvml.md).
	GPUs []snapshot.GPUUse `json:"gpus,omitempty"`
	// NVMLUnavailable says why there is no GPUs section, unless --no-nvml.
	NVMLUnavailable string `json:"nvml_unavailable,omitempty"`
	// Pods are the pods the kubelet says were given a GPU (docs/kubernetes.md).
	Pods []kubelet.Pod `json:"pods,omitempty"`
}

// psOptions: where to ask the kubelet which pod was given which GPU; the
// global flags say what else to read.
type psOptions struct {
	Pods *podresources.Options // nil: no Kubernetes node
	Wide bool                  // --wide: every column, none cut
}

func parsePs(c *cli.Context) (psOptions, error) {
	return psOptions{Pods: parsePodFlags(c), Wide: c.Bool("wide")}, nil
}

func runPs(ctx context.Context, g globals, o psOptions) error {
	snap, err := captureHost(ctx, g, snapshot.LabelSnapshot, "")
	if err != nil {
		return err
	}
	rep := psReport{Host: snap.Host, Scan: snap.Scan, Processes: []render.PsProcess{}, GPUs: snapshot.GPUUsage(snap)}
	alloc := podAllocations(ctx, g, o.Pods)
	if alloc != nil {
		rep.Pods = alloc.Pods
	}
	if snap.NVML.Source != snapshot.NVMLSourceDisabled {
		rep.NVMLUnavailable = snap.NVML.Unavailable
	}
	// A process NVML lists uses a GPU even when it maps and holds nothing we
	// can see (its /dev may be a container's): it is listed too.
	listed := map[*snapshot.Process]bool{}
	for _, gu := range rep.GPUs {
		for _, p := range gu.Processes {
			listed[p.Process] = true
		}
	}
	triage := diff.HostTriage(snap)
	for i := range snap.Processes {
		if p := &snap.Processes[i]; p.UsesNVIDIA() || listed[p] {
			rep.Processes = append(rep.Processes, render.PsProcess{Process: *p, Triage: triage(p)})
		}
	}
	if g.JSON {
		return render.JSON(g.Stdout, rep)
	}
	if err := render.PsTable(g.Stdout, rep.Processes, rep.GPUs, snap.Host.CaptureStart, o.Wide); err != nil {
		return err
	}
	render.PsGPUs(g.Stdout, rep.GPUs, alloc)
	if rep.NVMLUnavailable != "" {
		fmt.Fprintf(g.Stderr, "gpusnap: NVML unavailable (%s): no per-GPU section\n", safetext.Escape(rep.NVMLUnavailable))
	}
	if line := render.PsLastLine(len(rep.Processes), rep.Scan); line != "" {
		fmt.Fprintln(g.Stderr, line)
	}
	return nil
}
