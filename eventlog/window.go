package eventlog

import "time"

// Source is a window's events as diff and bundle walk them, held in memory
// (a ReadResult) or read from disk at every walk (a Window).
type Source interface {
	// Each hands fn the window's events in the order written until fn
	// returns false. An event may be kept, as each is a value of its own.
	Each(fn func(*Event) bool) error
	// Meta is what reading the window found besides its events, its Before,
	// Damaged, Broken, Faults and Unchained (its Events may be empty).
	Meta() *ReadResult
}

// Each walks the events held.
func (r *ReadResult) Each(fn func(*Event) bool) error {
	for i := range r.Events {
		e := r.Events[i]
		if !fn(&e) {
			break
		}
	}
	return nil
}

// Meta is r itself.
func (r *ReadResult) Meta() *ReadResult { return r }

// Window is the events of the log with since <= time < until. A window of
// at most maxHeld events is read once and walked from memory. A larger one
// is read from disk at every walk and never all held, since a tenant's
// processes decide how many there are, and a diff must stay within its
// memory whatever they do.
type Window struct {
	dir          string
	since, until time.Time
	meta         ReadResult
	held         []Event
	spilled      bool // more than maxHeld events, walked from disk
}

// maxHeld bounds the events a Window keeps from its first read, a few MiB
// (docs/watch.md). A diff's rules walk the window about ten times, and a
// window a watch with coalescing wrote for a job (a record a second per
// busy process, a heartbeat every 30 s) is mostly far smaller.
const maxHeld = 4096

// OpenWindow reads the window once, checking every line of its segments
// (Meta says what it found), and keeps its events where there are at most
// maxHeld of them. ErrNoLog says watch never ran with this store.
func OpenWindow(dir string, since, until time.Time) (*Window, error) {
	w := &Window{dir: dir, since: since, until: until}
	if err := walk(dir, since, until, &w.meta, w.hold); err != nil {
		return nil, err
	}
	return w, nil
}

// hold keeps e for later walks until the window proves larger than
// maxHeld. It never stops the read.
func (w *Window) hold(e *Event) bool {
	switch {
	case w.spilled:
	case len(w.held) < maxHeld:
		w.held = append(w.held, *e)
	default:
		w.held, w.spilled = nil, true
	}
	return true
}

// Each hands fn the window's events, those held or, for a window larger
// than maxHeld, read from disk again. Where a read from disk found more
// lines damaged or breaking the chain than the reads before (the log
// changed meanwhile), Meta says this read's.
func (w *Window) Each(fn func(*Event) bool) error {
	if !w.spilled {
		for i := range w.held {
			e := w.held[i]
			if !fn(&e) {
				break
			}
		}
		return nil
	}
	var scratch ReadResult
	err := walk(w.dir, w.since, w.until, &scratch, fn)
	if scratch.Damaged+scratch.Broken > w.meta.Damaged+w.meta.Broken {
		w.meta.Damaged, w.meta.Broken, w.meta.Faults = scratch.Damaged, scratch.Broken, scratch.Faults
	}
	return err
}

// Meta is what OpenWindow found.
func (w *Window) Meta() *ReadResult { return &w.meta }
