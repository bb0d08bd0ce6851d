package main

import (
	"context"
	"fmt"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/session"
	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
	"github.com/gpusnap/gpusnap/watch"
)

// host is the host tenant sessions run on, as the global flags say: captured
// by captureHost, its store --db, warnings on stderr. Each command makes
// its own: a Host holds the store for one command.
func (g globals) host() *session.Host {
	return &session.Host{
		DB: g.DB, KernelLog: g.KernelLog, Version: capture.Version, Retain: watch.DefaultRetain, Trace: g.Trace,
		Capture: func(ctx context.Context, label, tenant string) (*snapshot.Snapshot, error) {
			return captureHost(ctx, g, label, tenant)
		},
		DriverSign: capture.NVIDIADriverSign,
		Open:       func(readOnly bool) (*store.Store, error) { return openStore(g, readOnly) },
		Warn:       func(line string) { fmt.Fprintln(g.Stderr, "gpusnap: "+line) },
	}
}

// readStore runs read on --db opened read-only, and closes it before
// returning, as session.Host.Read does for every reader.
func readStore(g globals, read func(*store.Store) error) error {
	return g.host().Read(read)
}

// openStore opens --db; readers open it read-only and never block each other.
func openStore(g globals, readOnly bool) (*store.Store, error) {
	return store.Open(g.DB, store.Options{ReadOnly: readOnly, LockTimeout: g.LockTimeout})
}
