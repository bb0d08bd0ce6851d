package session

import (
	"context"
	"fmt"

	"github.com/gpusnap/gpusnap/store"
)

// Hold starts one command's hold of the store. Until Release every step
// of the command (the pair, the history, the record of the verdict, a
// bundle's proofs) works on one open of the store, read-write from the
// first when write. Without a hold each step opens the store and closes it.
// A hold is dropped before a capture, so no lock is held over a /proc walk.
func (h *Host) Hold(write bool) {
	h.holding, h.holdWrite = true, write
}

// Release closes the store the hold opened, and ends the hold. Its error is
// the store's, as a step's close would have been.
func (h *Host) Release() error {
	h.holding = false
	return h.drop()
}

// drop closes the held store but keeps the hold, whose next step opens anew.
func (h *Host) drop() error {
	if h.held == nil {
		return nil
	}
	st := h.held
	h.held = nil
	if err := st.Close(); err != nil {
		return fmt.Errorf("store %s: %w", h.DB, err)
	}
	return nil
}

// use runs f on the store, opened read-write when write, and lets go of it.
func (h *Host) use(write bool, f func(*store.Store) error) error {
	st, err := h.acquire(write)
	if err != nil {
		return err
	}
	err = f(st)
	if cerr := h.let(st); err == nil {
		err = cerr
	}
	return err
}

// acquire opens the store, read-write when write. Within a hold it is the
// held store, opened at the first need. A read-only hold asked to write is
// closed and opened again read-write, so a command that writes says so in
// Hold and opens once.
func (h *Host) acquire(write bool) (*store.Store, error) {
	if !h.holding {
		return h.open(!write)
	}
	if h.held != nil && write && !h.heldWrite {
		if err := h.drop(); err != nil {
			return nil, err
		}
	}
	if h.held == nil {
		write = write || h.holdWrite
		st, err := h.open(!write)
		if err != nil {
			return nil, err
		}
		h.held, h.heldWrite = st, write
	}
	return h.held, nil
}

// let closes st, which acquire gave, unless the hold keeps it.
func (h *Host) let(st *store.Store) error {
	if st == h.held {
		return nil
	}
	if err := st.Close(); err != nil {
		return fmt.Errorf("store %s: %w", h.DB, err)
	}
	return nil
}

// open opens the store at DB and tells the trace. Readers open it
// read-only and never block each other.
func (h *Host) open(readOnly bool) (*store.Store, error) {
	if h.Trace != nil && h.Trace.Opened != nil {
		h.Trace.Opened(readOnly)
	}
	return store.Open(h.DB, store.Options{ReadOnly: readOnly, LockTimeout: h.LockTimeout})
}

// read runs read on the store, read-only (a hold's store when held), and
// lets go of it before returning outside a hold. A reader copies what it
// needs, so one whose stdout is blocked (`show --json | less`) never holds
// the lock a prolog's baseline waits for.
func (h *Host) read(read func(*store.Store) error) error {
	return h.use(false, read)
}

// Trace is told of what a Host does with the store, as net/http/httptrace
// is of a request. A test counts the opens of one command with it.
type Trace struct {
	// Opened is called before each open of the store.
	Opened func(readOnly bool)
}

type traceKey struct{}

// WithTrace returns ctx carrying t, for the Hosts a command makes with it.
func WithTrace(ctx context.Context, t *Trace) context.Context {
	return context.WithValue(ctx, traceKey{}, t)
}

// ContextTrace is the Trace ctx carries, nil when none.
func ContextTrace(ctx context.Context) *Trace {
	t, _ := ctx.Value(traceKey{}).(*Trace)
	return t
}
