package main

import (
	"fmt"

	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
)

// storeSnapshot puts a capture into --db. Commands open the store after
// capturing, so its lock is held for the write alone and not for the /proc walk.
func storeSnapshot(g globals, snap *snapshot.Snapshot) error {
	_, err := storeEncoded(g, snap)
	return err
}

// storeEncoded is storeSnapshot that returns the processes' JSON it stored.
func storeEncoded(g globals, snap *snapshot.Snapshot) ([][]byte, error) {
	st, err := openStore(g, false)
	if err != nil {
		return nil, err
	}
	procs, err := st.EncodeProcesses(snap)
	if err == nil {
		err = st.PutEncoded(snap, procs)
	}
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	if err := st.Close(); err != nil {
		return nil, fmt.Errorf("store %s: %w", g.DB, err)
	}
	return procs, nil
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
