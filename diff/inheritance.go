package diff

import (
	"cmp"
	"fmt"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

// HistoryLimit bounds the tenant's snapshots CompareWithHistory reads to tell
// where a surviving mapping came from, the newest ones, taken last while the
// tenant ran.
const HistoryLimit = 5

// CompareWithHistory diffs from and to, and diffs again with the tenant's
// snapshots taken while it ran (at most HistoryLimit, read from history) when
// a finding would name more with them (Result.WantsHistory) and from names a
// tenant. They stay in opts.History, so a caller that compares again compares
// alike. A clean diff reads none.
func CompareWithHistory(from, to *snapshot.Snapshot, opts *Options, history func() ([]*snapshot.Snapshot, error)) (*Result, error) {
	r := Compare(from, to, *opts)
	if !r.WantsHistory() || from.Tenant == "" || history == nil {
		return r, nil
	}
	var err error
	if opts.History, err = history(); err != nil {
		return nil, err
	}
	return Compare(from, to, *opts), nil
}

// WantsHistory reports whether a finding would name more with
// Options.History, for a device a surviving process may have inherited from a
// tenant process, or a PID the kernel log blames (or NVML's accounting
// names) that no snapshot at either end has. Only then is the history read, so callers may load it only when
// this says so.
func (r *Result) WantsHistory() bool {
	for _, f := range r.Findings {
		switch {
		case f.Process == nil:
		case ruleFor(f.Kind).Inheritable:
			return true
		case f.Process.StartTime == 0 && ruleFor(f.Kind).ByPID:
			return true
		}
	}
	return false
}

// ancestor is a tenant process, seen in an earlier snapshot, that had a mapping.
type ancestor struct {
	snap *snapshot.Snapshot
	proc *snapshot.Process
	m    snapshot.Mapping
}

// mappingSig is what makes two mappings the same, the device, offset and size.
type mappingSig struct {
	path   string
	offset uint64
	size   uint64
}

// history indexes the tenant processes' mappings in earlier snapshots.
type history struct {
	bySig map[mappingSig][]ancestor
	ppid  map[*snapshot.Snapshot]map[string]int // PPID of each process, by PID@START
}

// attachInheritance marks findings of a surviving process whose mapping
// matches one a tenant process had in an earlier stored snapshot, as
// "inherited from PID@START (exe)".
func (c *comparison) attachInheritance(findings []Finding) {
	c.attachEventInheritance(findings)
	if len(c.opts.History) == 0 {
		return
	}
	var h *history
	for i := range findings {
		f := &findings[i]
		if !ruleFor(f.Kind).Inheritable || f.Process == nil || f.InheritedFrom != "" {
			continue
		}
		p := c.toByKey[idOf(f.Process.PID, f.Process.StartTime)]
		if p == nil {
			continue
		}
		if h == nil {
			h = c.indexHistory()
		}
		for _, m := range p.Mappings {
			if m.Path != f.Device {
				continue
			}
			if a, ok := h.bestAncestor(p, m); ok {
				f.InheritedFrom = fmt.Sprintf("%s (%s)", a.proc.Key(), a.proc.Exe)
				f.Evidence = append(f.Evidence, fmt.Sprintf("inherited: in snapshot %s tenant process %s (%s) mapped %s",
					a.snap.ID, a.proc.Key(), a.proc.Comm, a.m.Line()))
				break
			}
		}
	}
}

// attachEventInheritance marks findings of a surviving process that the
// event log shows forked (directly or through forks) from a process that
// opened or mapped a device. The fork handed it the descriptors and mappings.
func (c *comparison) attachEventInheritance(findings []Finding) {
	if c.opts.Events == nil {
		return
	}
	var parents, users map[string]*eventlog.Event
	for i := range findings {
		f := &findings[i]
		if !ruleFor(f.Kind).Inheritable || f.Process == nil {
			continue
		}
		if parents == nil {
			parents, users = c.forkIndex()
		}
		fork, use := eventAncestor(f.Process.Key(), parents, users)
		if use == nil {
			continue
		}
		f.InheritedFrom = fmt.Sprintf("%s (%s)", use.Process.Key(), use.Process.Exe)
		f.Evidence = append(f.Evidence, fmt.Sprintf("inherited: the event log shows %s (%s) forked %s, and %s",
			fork.Process.Key(), fork.Process.Comm, fork.Child.Key(), eventEvidence(use)))
	}
}

// indexHistory indexes the device mappings of tenant processes in the
// history, processes absent from FROM, which ran after the baseline.
func (c *comparison) indexHistory() *history {
	h := &history{bySig: make(map[mappingSig][]ancestor), ppid: make(map[*snapshot.Snapshot]map[string]int)}
	for _, s := range c.opts.History {
		ppid := make(map[string]int, len(s.Processes))
		h.ppid[s] = ppid
		for i := range s.Processes {
			p := &s.Processes[i]
			key := p.Key()
			ppid[key] = p.PPID
			if len(p.Mappings) == 0 || c.fromByKey[idOf(p.PID, p.StartTime)] != nil {
				continue
			}
			for _, m := range p.Mappings {
				sig := mappingSig{m.Path, m.Offset, m.Size}
				h.bySig[sig] = append(h.bySig[sig], ancestor{snap: s, proc: p, m: m})
			}
		}
	}
	return h
}

// bestAncestor picks, among the tenant processes that had the mapping, the
// one the survivor most likely got it from, its parent at the time, else the
// oldest.
func (h *history) bestAncestor(survivor *snapshot.Process, m snapshot.Mapping) (ancestor, bool) {
	var best ancestor
	found, bestIsParent := false, false
	key := survivor.Key()
	for _, a := range h.bySig[mappingSig{m.Path, m.Offset, m.Size}] {
		if a.proc.Key() == key {
			continue
		}
		if !m.DeviceNumber.IsZero() && !a.m.DeviceNumber.IsZero() && m.DeviceNumber != a.m.DeviceNumber {
			continue
		}
		ppid, seen := h.ppid[a.snap][key]
		isParent := seen && ppid == a.proc.PID
		better := !found ||
			(isParent && !bestIsParent) ||
			(isParent == bestIsParent && cmp.Or(
				cmp.Compare(a.proc.StartTime, best.proc.StartTime),
				cmp.Compare(a.proc.PID, best.proc.PID)) < 0)
		if better {
			best, found, bestIsParent = a, true, isParent
		}
	}
	return best, found
}
