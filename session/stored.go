package session

import (
	"fmt"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
)

// The store's records as commands select and print them. They are the
// store's own types, named here so that a command reaches the store only
// through a Host.
type (
	// Meta is one stored snapshot as list and prune print it.
	Meta = store.Meta
	// Filter selects stored snapshots by tenant, label and time.
	Filter = store.Filter
	// Prune says which snapshots a prune removes.
	Prune = store.Prune
	// LogReport is what a proof of the store against its log found.
	LogReport = store.LogReport
)

// DefaultLockTimeout is how long an open of the store waits for another
// gpusnap holding it, unless told otherwise.
const DefaultLockTimeout = store.DefaultLockTimeout

// CachePaths are the files beside the store at db where captures keep what
// they hashed (binaries) and what cannot change without an exec
// (processes). Each is "" where root would refuse it, because another user
// could tamper with it.
func CachePaths(db string) (binaries, processes string) {
	return store.BinaryCachePath(db), store.ProcessCachePath(db)
}

// List is the stored snapshots f selects, newest first.
func (h *Host) List(f Filter) (metas []Meta, err error) {
	err = h.read(func(st *store.Store) error {
		metas, err = st.List(f)
		return err
	})
	return metas, err
}

// Show is the stored snapshot id (any unique prefix) with only what show
// prints of its processes, those using an NVIDIA device.
func (h *Host) Show(id string) (snap *snapshot.Snapshot, err error) {
	err = h.read(func(st *store.Store) error {
		snap, err = st.GetSelected(id, snapshot.ClassNVIDIA, (*snapshot.Process).UsesNVIDIA)
		return err
	})
	return snap, err
}

// StoredJSON is the stored snapshot id (any unique prefix) as the JSON the
// snapshot was captured as, in store.GetJSON's parts, each process appended
// by add. The store is closed before the caller writes it out, so a slow
// reader of the output does not hold it.
func (h *Host) StoredJSON(id string, add func(part, process []byte) []byte) (head []byte, procs [][]byte, err error) {
	err = h.read(func(st *store.Store) error {
		head, procs, err = st.GetJSON(id, add)
		return err
	})
	return head, procs, err
}

// Remove removes the snapshots ids name (any unique prefix), a tenant's
// latest baseline only when force, and returns each full id it removed. Each
// removal is its own transaction, so an error on the third leaves the first
// two removed and returned. The caller prints them after the store is
// closed: a reader slow to take the output must not hold the write lock
// that a prolog's baseline waits for.
func (h *Host) Remove(ids []string, force bool) (removed []string, err error) {
	err = h.use(true, func(st *store.Store) error {
		for _, arg := range ids {
			id, err := st.Remove(arg, force)
			if err != nil {
				return err
			}
			removed = append(removed, id)
		}
		return nil
	})
	return removed, err
}

// Prune removes the snapshots p selects and returns them, newest first. A
// dry run opens the store read-only and removes nothing.
func (h *Host) Prune(p Prune) (removed []Meta, err error) {
	err = h.use(!p.DryRun, func(st *store.Store) error {
		removed, err = st.Prune(p)
		return err
	})
	return removed, err
}

// StoreCheck is what a check of the store found. Damage is the error a
// command ends with when the check found problems, nil when it found none.
type StoreCheck struct {
	store.CheckResult
	Damage error
}

// Check runs the store's consistency check, bbolt's over every page, then
// every snapshot loaded and its records and indexes compared.
func (h *Host) Check() (c StoreCheck, err error) {
	err = h.read(func(st *store.Store) error {
		c.CheckResult, err = st.Check()
		return err
	})
	if err == nil && len(c.Problems) > 0 {
		c.Damage = &store.DamagedError{Path: h.DB, Cause: fmt.Sprintf("%d problems found by the consistency check (first: %s)", len(c.Problems), c.Problems[0])}
	}
	return c, err
}

// EventSpan is what gpusnap watch recorded over a span of time, and how
// much of the span a watch covered.
type EventSpan struct {
	eventlog.ReadResult
	// From and To bound the span. A zero To runs to now.
	From, To time.Time
	Cover    eventlog.Coverage
}

// Events reads the event log beside the store from since, or over tenant's
// window when tenant is not "" (from its newest baseline, or since when
// later, to the post snapshot after it, or now).
func (h *Host) Events(tenant string, since, now time.Time) (EventSpan, error) {
	span := EventSpan{From: since}
	if tenant != "" {
		from, to, err := h.tenantWindow(tenant)
		if err != nil {
			return span, err
		}
		if from.After(span.From) {
			span.From = from
		}
		span.To = to
	}
	var err error
	if span.ReadResult, err = eventlog.ReadEvents(eventlog.JournalDir(h.DB), span.From, span.To); err != nil {
		return span, err
	}
	end := span.To
	if end.IsZero() {
		end = now
	}
	span.Cover = eventlog.Cover(span.ReadResult, span.From, end)
	return span, nil
}

// tenantWindow is the span diff --tenant T reports on, from T's newest
// baseline to the first post snapshot after it, or zero (now) when none.
func (h *Host) tenantWindow(tenant string) (from, to time.Time, err error) {
	err = h.read(func(st *store.Store) error {
		base, err := st.LatestBaseline(tenant)
		if err != nil {
			return err
		}
		from = base.Host.CaptureStart
		posts, err := st.List(store.Filter{Tenant: tenant, Label: snapshot.LabelPost, Since: from})
		if len(posts) > 0 {
			to = posts[len(posts)-1].Time // List is newest first, so this is the first post after the baseline
		}
		return err
	})
	return from, to, err
}
