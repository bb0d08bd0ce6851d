package main

import (
	"fmt"

	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
)

// storeSnapshot puts a capture into --db and returns the head of the
// store's log after its leaf. Commands open the store after capturing, so
// its lock is held for the write alone and not for the /proc walk.
func storeSnapshot(g globals, snap *snapshot.Snapshot) (store.TreeHead, error) {
	_, head, err := storeEncoded(g, snap)
	return head, err
}

// storeEncoded is storeSnapshot that also returns the processes' JSON it stored.
func storeEncoded(g globals, snap *snapshot.Snapshot) ([][]byte, store.TreeHead, error) {
	var head store.TreeHead
	st, err := openStore(g, false)
	if err != nil {
		return nil, head, err
	}
	procs, err := st.EncodeProcesses(snap)
	if err == nil {
		err = st.PutEncoded(snap, procs)
	}
	if err == nil {
		head, err = st.Head()
	}
	if err != nil {
		_ = st.Close()
		return nil, head, err
	}
	if err := st.Close(); err != nil {
		return nil, head, fmt.Errorf("store %s: %w", g.DB, err)
	}
	return procs, head, nil
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
