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

// readStore opens --db read-only, runs read, and closes it before returning:
// a reader copies what it needs and lets go of the store before it writes
// output, so a reader whose stdout is blocked (`show --json | less`) never
// holds the lock a prolog's baseline waits for.
func readStore(g globals, read func(*store.Store) error) error {
	st, err := openStore(g, true)
	if err != nil {
		return err
	}
	err = read(st)
	if cerr := st.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("store %s: %w", g.DB, cerr)
	}
	return err
}

// openStore opens --db; readers open it read-only and never block each other.
func openStore(g globals, readOnly bool) (*store.Store, error) {
	return store.Open(g.DB, store.Options{ReadOnly: readOnly, LockTimeout: g.LockTimeout})
}
