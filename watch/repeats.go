package watch

import (
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
)

// A process that opens and closes a device in a loop makes thousands of like
// events a second. The first is recorded as it comes and the like ones after
// it counted, in one record at most every repeatEvery and before the exit and
// stop records. An idle interval ends the run. The kernel counts such runs
// too (its records come with Count), so that a flood does not fill its ring
// buffer, and they are counted here as the events they stand for.
//
// A device user's descendants write fork, exit and inherit records at every
// fork, and one that forks and exits every few hundred microseconds hops
// thousands of PIDs a second. Those records are coalesced by lineage
// (eventlog.Event.Lineage), one per kind and device a repeatEvery, naming the
// first and last process. docs/watch.md has the log both floods wrote
// before they were counted.

const (
	repeatEvery = time.Second
	// maxRepeatRuns bounds the runs counted at a time. Past it, events are
	// recorded one by one, as before, and none is dropped for it.
	maxRepeatRuns = 1 << 16
)

// repeatRun is the like events counted since a run's last record.
type repeatRun struct {
	last        eventlog.Event // the latest of them, the record's template
	first       time.Time
	firstProc   *eventlog.Process
	count       uint64
	idleFlushes int
}

// repeats holds the runs by owner (a process key, or a lineage's), then
// by what makes events alike.
type repeats struct {
	byProc map[string]map[string]*repeatRun
	n      int
}

func newRepeats() *repeats { return &repeats{byProc: map[string]map[string]*repeatRun{}} }

// likeness is what makes two events of one owner alike, and the owner. The
// owner is the process, or for a lineage's fork, inherit and exit records
// the lineage (a key no process has). Both are "" for an event never
// coalesced.
func likeness(e *eventlog.Event) (owner, like string) {
	if e.Process == nil {
		return "", ""
	}
	dev := ""
	if e.Device != nil {
		dev = e.Device.Path + "\x00" + e.Device.Number
	}
	switch {
	case (e.Kind == eventlog.KindOpen || e.Kind == eventlog.KindMmap) && e.Device != nil:
		owner = e.Process.Key()
	case (e.Kind == eventlog.KindFork || e.Kind == eventlog.KindInherit || e.Kind == eventlog.KindExit) && e.Lineage != "":
		owner = "lineage " + e.Lineage
	default:
		return "", ""
	}
	return owner, e.Kind + "\x00" + dev + "\x00" + e.Access + "\x00" + e.Perms
}

// take counts e if it repeats a run and reports whether it did. An event
// that is not kept is recorded as it is (and may start a run).
func (rs *repeats) take(e *eventlog.Event) bool {
	key, like := likeness(e)
	if like == "" {
		return false
	}
	runs := rs.byProc[key]
	if run := runs[like]; run != nil {
		if run.count == 0 {
			run.first, run.firstProc = e.Time, e.Process
		}
		run.last, run.idleFlushes = *e, 0
		run.count += max(e.Count, 1) // a kernel run's record stands for Count
		return true
	}
	if rs.n >= maxRepeatRuns {
		return false
	}
	if runs == nil {
		runs = map[string]*repeatRun{}
		rs.byProc[key] = runs
	}
	runs[like] = &repeatRun{}
	rs.n++
	return false
}

// record is the one record of what run counted.
func (run *repeatRun) record() eventlog.Event {
	e := run.last
	last := run.last.Time
	if !run.last.Last.IsZero() {
		last = run.last.Last
	}
	e.Time, e.Last, e.Count, e.FD = run.first, last, run.count, nil
	if e.Lineage != "" && run.firstProc != nil && run.firstProc.Key() != e.Process.Key() {
		e.First = run.firstProc
	}
	run.count, run.firstProc = 0, nil
	return e
}

// due returns the records of every run with counts, and ends the runs that
// were idle since the last call.
func (rs *repeats) due() []eventlog.Event {
	var out []eventlog.Event
	for key, runs := range rs.byProc {
		for like, run := range runs {
			if run.count > 0 {
				out = append(out, run.record())
				continue
			}
			if run.idleFlushes++; run.idleFlushes > 1 {
				delete(runs, like)
				rs.n--
			}
		}
		if len(runs) == 0 {
			delete(rs.byProc, key)
		}
	}
	return out
}

// end returns the records of a process's runs, and ends them, since its exit
// record comes after them.
func (rs *repeats) end(key string) []eventlog.Event {
	var out []eventlog.Event
	for _, run := range rs.byProc[key] {
		if run.count > 0 {
			out = append(out, run.record())
		}
		rs.n--
	}
	delete(rs.byProc, key)
	return out
}
