package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

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
		UsageText: "gpusnap ps [-p PID] [--gpu LIST] [--interval DUR] [--wide] [--json]\n\nExamples:\n" +
			"  gpusnap ps\n" +
			"  gpusnap ps -p 4242 --interval 1s   # one process, a fresh sample each second until Ctrl-C\n" +
			"  gpusnap ps --gpu 3 --json --interval 5s >> gpu3.jsonl   # one JSON line a sample\n" +
			"  gpusnap ps --wide   # every column, none cut: holders, mappings, package, SHA-256\n" +
			"  gpusnap ps --json | jq '.processes[] | {pid, exe, container_id}'\n" +
			"  gpusnap ps --proc-root fixtures/proc/gpuhost --no-nvml\n\n" +
			"On a Kubernetes node (the kubelet's pod-resources socket is there), each GPU shows the pods given it,\n" +
			"and a process of another pod that uses it.",
		Flags: append(podFlags(), &cli.BoolFlag{Name: "wide", Aliases: []string{"w"},
			Usage: "show every column (holders, mappings, package, SHA-256) and cut none; without it the table fits 120 columns, a cut value ending in …"},
			&cli.StringSliceFlag{Name: "pid", Aliases: []string{"p"}, Usage: "only the process `PID` (repeat it, or give a comma list)"},
			&cli.StringFlag{Name: "gpu", Usage: "only the GPUs of `LIST`, as check --gpus reads it: minor numbers (the N of /dev/nvidiaN: 3, 0,1 or 0-3) and UUIDs"},
			&cli.DurationFlag{Name: "interval", Usage: "sample again every `DUR` (at least 100ms) until SIGINT or SIGTERM: a terminal is redrawn, other output appended, --json one line a sample"}),
		Action: action(parsePs, runPs),
	}
}

// psReport is what `gpusnap ps --json` prints, the processes that map or
// hold an NVIDIA device, with the host facts and scan counts behind them.
type psReport struct {
	// Time is when the sample was taken, which with --interval tells one
	// JSON line from the next.
	Time      time.Time          `json:"time"`
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

// psOptions say where to ask the kubelet which pod was given which GPU,
// what to show and how often. The global flags say what else to read.
type psOptions struct {
	Pods     *podresources.Options // nil on no Kubernetes node
	Wide     bool                  // --wide shows every column, none cut
	Filter   psFilter
	Interval time.Duration // --interval, 0 for one sample
}

// minPsInterval bounds --interval, since each sample is a whole capture.
const minPsInterval = 100 * time.Millisecond

func parsePs(c *cli.Context) (psOptions, error) {
	o := psOptions{Pods: parsePodFlags(c), Wide: c.Bool("wide"), Interval: c.Duration("interval")}
	if c.IsSet("interval") && o.Interval < minPsInterval {
		return o, usageError(fmt.Errorf("--interval %s: at least %s", o.Interval, minPsInterval))
	}
	for _, v := range c.StringSlice("pid") {
		pid, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || pid <= 0 {
			return o, usageError(fmt.Errorf("-p %q: not a PID", safetext.Line(v)))
		}
		o.Filter.PIDs = append(o.Filter.PIDs, pid)
	}
	var err error
	o.Filter.GPUs, err = gpuListFlag(c, "gpu", "show")
	return o, err
}

// runPs prints one sample, or with --interval one every interval until ctx
// is done (SIGINT, SIGTERM), which ends it with exit 0.
func runPs(ctx context.Context, g globals, o psOptions) error {
	if o.Interval == 0 {
		return psSample(ctx, g, o)
	}
	redraw := !g.JSON && isTerminal(g.Stdout)
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	for {
		if !g.JSON {
			if redraw {
				fmt.Fprint(g.Stdout, "\x1b[H\x1b[2J") // cursor home, clear screen
			}
			fmt.Fprintf(g.Stdout, "every %s: %s\n", o.Interval, time.Now().Format(time.DateTime))
		}
		if err := psSample(ctx, g, o); err != nil {
			if ctx.Err() != nil {
				return nil // a capture cut short by the signal
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if !g.JSON && !redraw {
			fmt.Fprintln(g.Stdout)
		}
	}
}

// psSample captures the host and prints what ps shows of it.
func psSample(ctx context.Context, g globals, o psOptions) error {
	snap, err := captureHost(ctx, g, snapshot.LabelSnapshot, "")
	if err != nil {
		return err
	}
	rep := psReport{Time: snap.Host.CaptureStart, Host: snap.Host, Scan: snap.Scan, Processes: []render.PsProcess{}, GPUs: snapshot.GPUUsage(snap)}
	alloc := podAllocations(ctx, g, o.Pods)
	if alloc != nil {
		rep.Pods = alloc.Pods
	}
	if snap.NVML.Source != snapshot.NVMLSourceDisabled {
		rep.NVMLUnavailable = snap.NVML.Unavailable
	}
	// A process NVML lists uses a GPU even when it maps and holds nothing we
	// can see (its /dev may be a container's), so it is listed too.
	listed := map[*snapshot.Process]bool{}
	for _, gu := range rep.GPUs {
		for _, p := range gu.Processes {
			listed[p.Process] = true
		}
	}
	triage := diff.HostTriage(snap)
	for i := range snap.Processes {
		if p := &snap.Processes[i]; p.UsesNVIDIA() || listed[p] || p.AcceleratorWork(snap.Accelerators) {
			rep.Processes = append(rep.Processes, render.PsProcess{Process: *p, Triage: triage(p)})
		}
	}
	found, allGPUs := len(rep.Processes), rep.GPUs
	notes := o.Filter.apply(&rep, snap)
	if g.JSON {
		if o.Interval > 0 {
			err = json.NewEncoder(g.Stdout).Encode(rep) // JSON lines, one a sample
		} else {
			err = render.JSON(g.Stdout, rep)
		}
	} else {
		err = psText(g, o, rep, allGPUs, alloc)
	}
	if err != nil {
		return err
	}
	if rep.NVMLUnavailable != "" && !g.JSON {
		fmt.Fprintf(g.Stderr, "gpusnap: NVML unavailable (%s): no per-GPU section\n", safetext.Escape(rep.NVMLUnavailable))
	}
	for _, n := range notes {
		fmt.Fprintln(g.Stderr, "gpusnap: "+n)
	}
	if line := render.PsLastLine(found, rep.Scan); line != "" && !g.JSON {
		fmt.Fprintln(g.Stderr, line)
	}
	return nil
}

// psText prints the table, each row's NVML figures read from every GPU
// whatever the filter, then the section of each GPU kept.
func psText(g globals, o psOptions, rep psReport, allGPUs []snapshot.GPUUse, alloc *kubelet.Allocations) error {
	if err := render.PsTable(g.Stdout, rep.Processes, allGPUs, rep.Host.CaptureStart, o.Wide); err != nil {
		return err
	}
	if alloc == nil {
		render.PsGPUs(g.Stdout, rep.GPUs, nil)
	} else {
		render.PsGPUs(g.Stdout, rep.GPUs, kubeletPods{alloc})
	}
	return nil
}

// kubeletPods shows the kubelet's allocations to render, which links no
// kubelet code.
type kubeletPods struct{ *kubelet.Allocations }

func (k kubeletPods) GivenTo(g *snapshot.GPUUse) []render.Pod {
	var out []render.Pod
	for _, p := range k.PodsOf(g) {
		out = append(out, render.Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID})
	}
	return out
}

func (k kubeletPods) Named(uid string) (render.Pod, bool) {
	for _, p := range k.Pods {
		if p.UID == uid {
			return render.Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID}, true
		}
	}
	return render.Pod{}, false
}
