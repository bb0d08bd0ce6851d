package main

import (
	"context"
	"fmt"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/session"
	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/watch"
)

// host is the host tenant sessions run on, as the global flags say. It is
// captured by captureHost, its store is --db, and warnings go to stderr.
// Each command makes its own and reaches the store only through it, as a
// Host holds the store for one command.
func (g globals) host() *session.Host {
	return &session.Host{
		DB: g.DB, KernelLog: g.KernelLog, Version: capture.Version, Retain: watch.DefaultRetain, Trace: g.Trace,
		Capture: func(ctx context.Context, label, tenant string) (*snapshot.Snapshot, error) {
			return captureHost(ctx, g, label, tenant)
		},
		DriverSign:  capture.NVIDIADriverSign,
		LockTimeout: g.LockTimeout,
		Warn:        func(line string) { fmt.Fprintln(g.Stderr, "gpusnap: "+line) },
	}
}
