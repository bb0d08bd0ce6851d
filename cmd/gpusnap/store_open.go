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

// openStore opens --db; readers open it read-only and never block each other.
func openStore(g globals, readOnly bool) (*store.Store, error) {
	return store.Open(g.DB, store.Options{ReadOnly: readOnly, LockTimeout: g.LockTimeout})
}
