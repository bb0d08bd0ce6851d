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

// Post captures the host, then, in one open of the store, finds tenant's
// newest baseline and stores the capture as its post snapshot. No baseline
// is an error and stores nothing. A post snapshot that could not be stored
// (a full or read-only disk) is the pair's StoreErr.
func (h *Host) Post(ctx context.Context, tenant string) (Pair, error) {
	// Without a store there is no baseline. Say so before capturing, and
	// create no empty store on the way.
	if _, err := os.Stat(h.DB); errors.Is(err, fs.ErrNotExist) {
		return Pair{}, fmt.Errorf("%w for tenant %q: no store at %s (run gpusnap baseline --tenant first)", store.ErrNoBaseline, tenant, h.DB)
	}
	if err := h.drop(); err != nil {
		return Pair{}, err
	}
	to, err := h.Capture(ctx, snapshot.LabelPost, tenant)
	if err != nil {
		return Pair{}, err
	}
	// The event log is waited for before the store is opened, so that no
	// lock is held over the wait.
	h.settle(to)
	p := Pair{To: to}
	st, err := h.acquire(true)
	if err != nil {
		// A store that can be read but not written (a read-only filesystem)
		// still holds the baseline to judge by.
		p.StoreErr = fmt.Errorf("post snapshot %s not stored: %w", to.ID, err)
		if st, err = h.open(true); err != nil {
			return Pair{}, err
		}
		if h.holding {
			h.held, h.heldWrite = st, false
		}
	}
	p.From, err = st.LatestBaseline(tenant)
	if err == nil && p.StoreErr == nil {
		if perr := st.Put(to); perr != nil {
			p.StoreErr = fmt.Errorf("post snapshot %s not stored: %w", to.ID, perr)
		}
	}
	if cerr := h.let(st); cerr != nil && err == nil && p.StoreErr == nil {
		p.StoreErr = fmt.Errorf("post snapshot %s: %w", to.ID, cerr)
	}
	if err != nil {
		return Pair{}, err
	}
	return p, nil
}

// HasBaseline says whether the store holds a baseline of tenant. A store
// that cannot be read is an error, never a no.
func (h *Host) HasBaseline(tenant string) (bool, error) {
	err := h.read(func(st *store.Store) error {
		_, err := st.LatestBaseline(tenant)
		return err
	})
	if errors.Is(err, store.ErrNoBaseline) {
		return false, nil
	}
	return err == nil, err
}

// Stored loads fromID and toID from the store, read-only outside a hold
// that writes. Without toID it captures the host now and does not store it.
func (h *Host) Stored(ctx context.Context, fromID, toID string) (Pair, error) {
	if toID == "" {
		return h.storedAndNow(ctx, fromID)
	}
	var p Pair
	err := h.read(func(st *store.Store) error {
		// In one load, so the processes both hold unchanged decode once.
		snaps, err := st.GetShared(fromID, toID)
		if err != nil {
			return err
		}
		p.From, p.To = snaps[0], snaps[1]
		return nil
	})
	return p, err
}

// storedAndNow loads fromID, read-only and apart from any hold, and pairs it
// with a capture of the host now, which holds no lock.
func (h *Host) storedAndNow(ctx context.Context, fromID string) (Pair, error) {
	if err := h.drop(); err != nil {
		return Pair{}, err
	}
	st, err := h.open(true)
	if err != nil {
		return Pair{}, err
	}
	from, err := st.Get(fromID)
	if cerr := h.let(st); err == nil {
		err = cerr
	}
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
// after it. With no such post snapshot it does what Post does, capturing
// one now and storing it, which opens the store a second time because the
// capture holds no lock.
func (h *Host) Latest(ctx context.Context, tenant string) (Pair, error) {
	var p Pair
	err := h.read(func(st *store.Store) (err error) {
		if p.From, err = st.LatestBaseline(tenant); err == nil {
			p.To, err = st.LatestPost(p.From)
		}
		return err
	})
	if err != nil {
		return Pair{}, err
	}
	if p.To != nil {
		return p, nil
	}
	return h.Post(ctx, tenant)
}
