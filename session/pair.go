package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
)

// Post captures the host, then, in one hold of the store, finds tenant's
// newest baseline and stores the capture as its post snapshot. No baseline
// is an error and stores nothing; a post snapshot that could not be stored
// (a full or read-only disk) is the pair's StoreErr.
func (h *Host) Post(ctx context.Context, tenant string) (Pair, error) {
	// Without a store there is no baseline: say so before capturing, and
	// create no empty store on the way.
	if _, err := os.Stat(h.DB); errors.Is(err, fs.ErrNotExist) {
		return Pair{}, fmt.Errorf("%w for tenant %q: no store at %s (run gpusnap baseline --tenant first)", store.ErrNoBaseline, tenant, h.DB)
	}
	to, err := h.Capture(ctx, snapshot.LabelPost, tenant)
	if err != nil {
		return Pair{}, err
	}
	p := Pair{To: to}
	st, err := h.Open(false)
	if err != nil {
		// A store that can be read but not written (a read-only filesystem)
		// still holds the baseline to judge by.
		p.StoreErr = fmt.Errorf("post snapshot %s not stored: %w", to.ID, err)
		if st, err = h.Open(true); err != nil {
			return Pair{}, err
		}
	}
	p.From, err = st.LatestBaseline(tenant)
	if err == nil && p.StoreErr == nil {
		if perr := st.Put(to); perr != nil {
			p.StoreErr = fmt.Errorf("post snapshot %s not stored: %w", to.ID, perr)
		}
	}
	if cerr := st.Close(); cerr != nil && err == nil && p.StoreErr == nil {
		p.StoreErr = fmt.Errorf("post snapshot %s: store %s: %w", to.ID, h.DB, cerr)
	}
	if err != nil {
		return Pair{}, err
	}
	return p, nil
}

// HasBaseline says whether the store holds a baseline of tenant; a store
// that cannot be read is an error, never a no.
func (h *Host) HasBaseline(tenant string) (bool, error) {
	st, err := h.Open(true)
	if err != nil {
		return false, err
	}
	defer st.Close()
	_, err = st.LatestBaseline(tenant)
	if errors.Is(err, store.ErrNoBaseline) {
		return false, nil
	}
	return err == nil, err
}

// Stored loads fromID and toID from the store, read-only. Without toID it
// captures the host now and does not store it: a reader never takes the
// store's write lock.
func (h *Host) Stored(ctx context.Context, fromID, toID string) (Pair, error) {
	st, err := h.Open(true)
	if err != nil {
		return Pair{}, err
	}
	defer st.Close()
	if toID != "" {
		// In one load, so the processes both hold unchanged decode once.
		snaps, err := st.GetShared(fromID, toID)
		if err != nil {
			return Pair{}, err
		}
		return Pair{From: snaps[0], To: snaps[1]}, nil
	}
	from, err := st.Get(fromID)
	if err != nil {
		return Pair{}, err
	}
	to, err := h.Capture(ctx, snapshot.LabelSnapshot, from.Tenant)
	if err != nil {
		return Pair{}, err
	}
	return Pair{From: from, To: to}, nil
}

// Latest is tenant's newest baseline and the newest post snapshot taken
// after it. With no such post snapshot it does what Post does: capture one
// now and store it.
func (h *Host) Latest(ctx context.Context, tenant string) (Pair, error) {
	st, err := h.Open(true)
	if err != nil {
		return Pair{}, err
	}
	var p Pair
	p.From, err = st.LatestBaseline(tenant)
	if err == nil {
		p.To, err = st.LatestPost(p.From)
	}
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Pair{}, err
	}
	if p.To != nil {
		return p, nil
	}
	return h.Post(ctx, tenant)
}
