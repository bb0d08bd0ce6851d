package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/watch"
)

func watchCommand() *cli.Command {
	return &cli.Command{
		Name:  "watch",
		Usage: "record every open and mapping of an NVIDIA device, and the lives of the processes that make them, until stopped",
		UsageText: "gpusnap watch [--listen ADDR] [--interval DUR] [--util-interval DUR] [--mode auto|bpf|fallback] [--retain DUR]\n\n" +
			"Runs until SIGTERM or SIGINT, then records what it still holds and exits 0. Events go to the store's\n" +
			"event log (the directory DB.events beside the store file), read by gpusnap events and diff --tenant.\n" +
			"It says on stderr which mode runs and what that mode cannot see (docs/watch.md).\n\n" +
			"Examples:\n  gpusnap watch --listen 127.0.0.1:9402\n  systemctl enable --now gpusnap-watch   # contrib/systemd/gpusnap-watch.service",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Usage: "serve Prometheus metrics on `ADDR` (host:port) at /metrics"},
			&cli.DurationFlag{Name: "interval", Value: watch.DefaultInterval, Usage: "in the fallback, read every `DUR` the processes the proc connector named, the young and a share of the rest"},
			&cli.DurationFlag{Name: "util-interval", Value: watch.DefaultUtilInterval, Usage: "read NVML (its process lists and the GPUs' and processes' utilization) every `DUR`"},
			&cli.StringFlag{Name: "mode", Value: watch.ModeAuto, Usage: "`MODE`: auto (BPF where it loads, else the fallback), bpf (BPF or exit 2), fallback"},
			&cli.DurationFlag{Name: "retain", Value: watch.DefaultRetain, Usage: "remove event log segments older than `DUR`"},
		},
		Action: watchAction(),
	}
}

// watchOptions are watch's flags.
type watchOptions struct {
	Listen       string
	Interval     time.Duration
	UtilInterval time.Duration
	Mode         string
	Retain       time.Duration
}

func parseWatch(c *cli.Context) (watchOptions, error) {
	o := watchOptions{Listen: c.String("listen"), Interval: c.Duration("interval"), UtilInterval: c.Duration("util-interval"),
		Mode: c.String("mode"), Retain: c.Duration("retain")}
	switch o.Mode {
	case watch.ModeAuto, watch.ModeBPF, watch.ModeFallback:
	default:
		return o, usageError(fmt.Errorf("--mode %q: want auto, bpf or fallback", o.Mode))
	}
	if o.Interval < 10*time.Millisecond || o.UtilInterval < 10*time.Millisecond || o.Retain <= 0 {
		return o, usageError(errors.New("--interval and --util-interval must be at least 10ms, and --retain positive"))
	}
	return o, nil
}

// runWatch records until ctx is done (SIGTERM, SIGINT), then flushes and returns nil.
func runWatch(ctx context.Context, g globals, o watchOptions) error {
	opts := watch.Options{DB: g.DB, ProcRoot: g.ProcRoot, NVML: g.nvmlOptions(),
		Interval: o.Interval, UtilInterval: o.UtilInterval, Mode: o.Mode, Retain: o.Retain, Log: g.Stderr}
	if o.Listen != "" {
		m, stop, err := listenMetrics(g, o.Listen)
		if err != nil {
			return err
		}
		defer stop()
		opts.Metrics = m
	}
	stats, err := watch.Run(ctx, opts)
	if err != nil {
		return err
	}
	total := 0
	for _, n := range stats.Events {
		total += n
	}
	fmt.Fprintf(g.Stderr, "gpusnap watch: stopped: %d events recorded, %d lost", total, stats.Lost)
	if stats.Timed > 0 {
		fmt.Fprintf(g.Stderr, "; kernel event to disk: slowest %s, mean %s", stats.MaxLatency.Round(time.Millisecond),
			(stats.SumLatency / time.Duration(stats.Timed)).Round(time.Millisecond))
	}
	fmt.Fprintln(g.Stderr)
	return nil
}
