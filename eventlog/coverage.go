package eventlog

import (
	"fmt"
	"time"
)

// Gap is a span of a window during which no watch recorded.
type Gap struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	Why  string    `json:"why"`
}

// Coverage says how completely the log covers the window [from, to). It
// holds the spans no watch recorded, the events the kernel dropped, and the
// lines of the segments read that are not events as watch wrote them.
type Coverage struct {
	Gaps []Gap  `json:"gaps,omitempty"`
	Lost uint64 `json:"lost,omitempty"`
	// Modes are the modes the watches of the window ran in.
	Modes []string `json:"modes,omitempty"`
	// Damaged and Broken are ReadResult's counts of lines that are no event
	// and of records that break their segment's chain, and Faults names the
	// first of them. Either means an event of the window may be lost or
	// changed.
	Damaged int     `json:"damaged,omitempty"`
	Broken  int     `json:"broken,omitempty"`
	Faults  []Fault `json:"faults,omitempty"`
	// Unchained counts records written before the log had its chain. They
	// are read as they are, with nothing to tell whether they were changed.
	Unchained int `json:"unchained,omitempty"`
	// Blind are the blind spots of the window's watches that may hide an
	// open or a mapping (see Problems).
	Blind []string `json:"blind,omitempty"`
	// Other are problems the reader found beside the log's records (a
	// flush that never reached TO). Problems lists them last.
	Other []Problem `json:"other,omitempty"`
}

// Complete reports whether a watch recorded the whole window, lost
// nothing, and left every line of it whole and chained as written.
func (c Coverage) Complete() bool {
	return len(c.Gaps) == 0 && c.Lost == 0 && c.Damaged == 0 && c.Broken == 0
}

// Cover reads the coverage of [from, to) from what ReadEvents returned for it.
func Cover(r ReadResult, from, to time.Time) Coverage {
	c, _ := CoverSource(&r, from, to)
	return c
}

// CoverSource reads the coverage of [from, to) from a window's events,
// walking them once. The error is the walk's.
func CoverSource(src Source, from, to time.Time) (Coverage, error) {
	r := src.Meta()
	c := Coverage{Damaged: r.Damaged, Broken: r.Broken, Faults: r.Faults, Unchained: r.Unchained}
	running := false
	var runStart, last time.Time // the running watch's start, and its last record
	down := from                 // since when no watch has recorded
	first := true
	why := "no watch was recording"
	if b := r.Before; b != nil && b.Kind == KindWatchStart {
		// Its records before the window are not read, so it is taken as
		// alive at the window's start, and a silence from there counts.
		running, runStart, last = true, b.Time, b.Time
		if from.After(last) {
			last = from
		}
	} else if b != nil {
		why = "the watch was stopped"
	}
	addMode := func(m string) {
		for _, have := range c.Modes {
			if have == m {
				return
			}
		}
		c.Modes = append(c.Modes, m)
	}
	if running {
		addMode(r.Before.Mode)
		c.addBlind(r.Before.Blind)
	}
	// runLost is the running watch's count of dropped events. Each lost
	// record carries the count since its watch started (an over-count for a
	// window that began after, never an under-count).
	var runLost uint64
	silent := func(until time.Time) {
		if running && until.Sub(last) > 2*AliveEvery {
			c.Gaps = append(c.Gaps, Gap{From: last, To: until, Why: "the watch stopped reporting (killed without a stop record, or hung)"})
		}
	}
	err := src.Each(func(e *Event) bool {
		if first && from.IsZero() {
			down = e.Time // with no window asked, the log's own span
		}
		first = false
		if e.Kind != KindWatchStart {
			silent(e.Time) // a new start says itself how the last watch ended
		}
		switch e.Kind {
		case KindWatchStart:
			if running && e.Time.Equal(runStart) {
				return true // the same watch, in a new segment
			}
			if running {
				// The last watch ended without its stop record (killed, or the host went down).
				down, why = last, "the watch ended without stopping cleanly (killed, or the host went down)"
			}
			c.Lost += runLost
			runLost = 0
			if e.Time.After(down) {
				c.Gaps = append(c.Gaps, Gap{From: down, To: e.Time, Why: why})
			}
			running, runStart = true, e.Time
			addMode(e.Mode)
			c.addBlind(e.Blind)
		case KindWatchStop:
			running, down, why = false, e.Time, "the watch was stopped"
			c.Lost += max(runLost, e.Lost)
			runLost = 0
		case KindLost:
			if e.Source == SourceNVML {
				break // NVML's GPU events, not the kernel's, which a diff notes (they are not device uses)
			}
			if e.Lost == 0 {
				c.Lost++ // a source that could not count what it dropped lost at least one
			}
			runLost = max(runLost, e.Lost)
		}
		if running && e.Time.After(last) {
			last = e.Time
		}
		return true
	})
	silent(to)
	c.Lost += runLost
	if !running && to.After(down) {
		c.Gaps = append(c.Gaps, Gap{From: down, To: to, Why: why})
	}
	return c, err
}

// String says the coverage in one line.
func (g Gap) String() string {
	return fmt.Sprintf("%s to %s (%s)", g.From.UTC().Format(time.RFC3339), g.To.UTC().Format(time.RFC3339), g.Why)
}
