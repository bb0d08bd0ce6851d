package eventlog

import "time"

// Source is a window's events as diff and bundle walk them: held in memory
// (a ReadResult) or read from disk at every walk (a Window).
type Source interface {
	// Each hands fn the window's events in the order written until fn
	// returns false. An event may be kept: each is a value of its own.
	Each(fn func(*Event) bool) error
	// Meta is what reading the window found besides its events: Before,
	// Damaged, Broken, Faults, Unchained (its Events may be empty).
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

// Window is the events of the log with since <= time < until, read from
// disk at every walk and never all held: a tenant's processes decide how
// many there are, and a diff must stay within its memory whatever they do.
type Window struct {
	dir          string
	since, until time.Time
	meta         ReadResult
}

// OpenWindow reads the window once, checking every line of its segments
// (Meta says what it found), and keeps no event. ErrNoLog: watch never ran
// with this store.
func OpenWindow(dir string, since, until time.Time) (*Window, error) {
	w := &Window{dir: dir, since: since, until: until}
	if err := walk(dir, since, until, &w.meta, func(*Event) bool { return true }); err != nil {
		return nil, err
	}
	return w, nil
}

// Each reads the window again and hands fn its events. Where this walk
// found more lines damaged or breaking the chain than the walks before
// (the log changed meanwhile), Meta says this walk's.
func (w *Window) Each(fn func(*Event) bool) error {
	var scratch ReadResult
	err := walk(w.dir, w.since, w.until, &scratch, fn)
	if scratch.Damaged+scratch.Broken > w.meta.Damaged+w.meta.Broken {
		w.meta.Damaged, w.meta.Broken, w.meta.Faults = scratch.Damaged, scratch.Broken, scratch.Faults
	}
	return err
}

// Meta is what OpenWindow found.
func (w *Window) Meta() *ReadResult { return &w.meta }
