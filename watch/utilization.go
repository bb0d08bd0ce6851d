package watch

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

// utilBatch is the most samples one util record holds. That is a record a
// GPU every 30 s at the default interval, so the fields each record repeats
// (time, kind, seq, hash, the process ids) cost little per sample.
const utilBatch = 30

// deviceSample is one GPU's or MIG instance's figures at one read.
type deviceSample struct {
	gpu, parent string
	sm, mem     int   // percent, -1 not reported
	usedMiB     int64 // -1 not reported
	listed      int   // processes NVML listed on it, -1 lists unread
	procs       []procSample
	more        int // processes past eventlog.MaxUtilProcesses
	clamped     int // values NVML gave above 100
	note        string
}

type procSample struct{ pid, sm, mem int }

// migNote is said of every MIG instance's record. NVML samples processes per
// GPU, never per instance, and a GPU in MIG mode not at all.
const migNote = "per-process utilization: NVML gives none for a MIG instance"

// samplesOf turns one read of NVML into a sample of each GPU, each
// followed by its MIG instances'.
func samplesOf(nv *snapshot.NVML) []deviceSample {
	var out []deviceSample
	for i := range nv.Devices {
		g := &nv.Devices[i]
		path := snapshot.DeviceKey(i)
		s := newSample(cmp.Or(g.UUID, path), "", g.Utilization, g.Memory)
		s.listed = listedCount(nv, path, g.ProcessLists())
		s.takeProcesses(g)
		var migs []deviceSample
		for j := range g.MIGDevices {
			m := &g.MIGDevices[j]
			mpath := snapshot.MIGKey(path, j)
			ms := newSample(cmp.Or(m.UUID, mpath), s.gpu, m.Utilization, m.Memory)
			ms.note = migNote
			ms.listed = listedCount(nv, mpath, m.ProcessLists())
			if s.listed >= 0 && ms.listed >= 0 {
				s.listed += ms.listed
			} else {
				s.listed = -1
			}
			migs = append(migs, ms)
		}
		out = append(out, s)
		out = append(out, migs...)
	}
	return out
}

func newSample(gpu, parent string, u *snapshot.Utilization, m *snapshot.Memory) deviceSample {
	s := deviceSample{gpu: gpu, parent: parent, sm: -1, mem: -1, usedMiB: -1}
	if u != nil {
		s.sm, s.mem = s.clamp(u.GPU), s.clamp(u.Memory)
	}
	if m != nil {
		s.usedMiB = int64(m.Used >> 20)
	}
	return s
}

// clamp bounds a percentage NVML gave to 100, counting those above.
func (s *deviceSample) clamp(v uint32) int {
	if v > 100 {
		s.clamped++
		return 100
	}
	return int(v)
}

// listedCount counts the processes of lists, or -1 where one could not
// be read (the reader recorded it as missing under path).
func listedCount(nv *snapshot.NVML, path string, lists []snapshot.ProcessList) int {
	n := 0
	for _, l := range lists {
		if _, failed := nv.Missing[path+"."+l.Field]; failed {
			return -1
		}
		n += len(l.Processes)
	}
	return n
}

// takeProcesses sets the sample's processes, each listed or sampled. The SM
// and memory utilization of each is the mean of NVML's samples since the
// last read (zero use where there are none). The busiest MaxUtilProcesses
// are kept and the rest counted.
func (s *deviceSample) takeProcesses(g *snapshot.GPU) {
	type sum struct{ sm, mem, n int }
	by := map[int]*sum{}
	for _, l := range g.ProcessLists() {
		for _, p := range l.Processes {
			if by[p.PID] == nil {
				by[p.PID] = &sum{}
			}
		}
	}
	for _, u := range g.ProcessUtilization {
		t := by[u.PID]
		if t == nil {
			t = &sum{}
			by[u.PID] = t
		}
		t.sm += s.clamp(u.SMUtil)
		t.mem += s.clamp(u.MemUtil)
		t.n++
	}
	for pid, t := range by {
		p := procSample{pid: pid}
		if t.n > 0 {
			p.sm, p.mem = (t.sm+t.n/2)/t.n, (t.mem+t.n/2)/t.n
		}
		s.procs = append(s.procs, p)
	}
	slices.SortFunc(s.procs, func(a, b procSample) int { return cmp.Or(cmp.Compare(b.sm, a.sm), cmp.Compare(a.pid, b.pid)) })
	if len(s.procs) > eventlog.MaxUtilProcesses {
		s.more = len(s.procs) - eventlog.MaxUtilProcesses
		s.procs = s.procs[:eventlog.MaxUtilProcesses]
	}
}

// utilRecords gathers each device's samples into util records of up to
// utilBatch samples and MaxUtilProcesses processes.
type utilRecords struct {
	starts func(pid int) (uint64, bool) // a process's start time
	open   map[string]*openRecord
	order  []string // devices in the order first sampled
}

type openRecord struct {
	ev     eventlog.Event
	roster map[int]int // PID -> index in Procs
	clamp  int
}

func newUtilRecords(starts func(int) (uint64, bool)) *utilRecords {
	return &utilRecords{starts: starts, open: map[string]*openRecord{}}
}

// add records the samples of one read, taken at now. A record full (or
// without room for a sample's processes) is emitted first.
func (u *utilRecords) add(now time.Time, samples []deviceSample, emit func(...eventlog.Event)) {
	for i := range samples {
		s := &samples[i]
		r := u.open[s.gpu]
		if r != nil && (r.ev.Util.Len() >= utilBatch || !r.fits(s)) {
			u.close(s.gpu, emit)
			r = nil
		}
		if r == nil {
			r = &openRecord{ev: eventlog.Event{Time: now, Kind: eventlog.KindUtil, Source: eventlog.SourceNVML,
				Util: &eventlog.Util{GPU: s.gpu, Parent: s.parent}}, roster: map[int]int{}}
			if s.note != "" {
				r.ev.Util.Notes = []string{s.note}
			}
			if !slices.Contains(u.order, s.gpu) {
				u.order = append(u.order, s.gpu)
			}
			u.open[s.gpu] = r
		}
		u.append(r, now, s)
	}
}

// fits reports whether the record's roster has room for s's processes.
func (r *openRecord) fits(s *deviceSample) bool {
	n := len(r.roster)
	for _, p := range s.procs {
		if _, ok := r.roster[p.pid]; !ok {
			n++
		}
	}
	return n <= eventlog.MaxUtilProcesses
}

func (u *utilRecords) append(r *openRecord, now time.Time, s *deviceSample) {
	ut := r.ev.Util
	k := ut.Len()
	ut.At = append(ut.At, now.Sub(r.ev.Time).Milliseconds())
	ut.SM, ut.Mem = append(ut.SM, s.sm), append(ut.Mem, s.mem)
	ut.UsedMiB, ut.Listed = append(ut.UsedMiB, s.usedMiB), append(ut.Listed, s.listed)
	ut.More += s.more
	r.clamp += s.clamped
	seen := make(map[int]bool, len(s.procs))
	for _, p := range s.procs {
		idx, ok := r.roster[p.pid]
		if !ok {
			start, _ := u.starts(p.pid)
			ut.Procs = append(ut.Procs, eventlog.UtilProcess{PID: p.pid, StartTime: start})
			idx = len(ut.Procs) - 1
			r.roster[p.pid] = idx
			for range k {
				ut.Procs[idx].AppendAbsent()
			}
		}
		ut.Procs[idx].Append(p.sm, p.mem)
		seen[p.pid] = true
	}
	for pid, idx := range r.roster {
		if !seen[pid] {
			ut.Procs[idx].AppendAbsent()
		}
	}
}

// close emits the open record of gpu.
func (u *utilRecords) close(gpu string, emit func(...eventlog.Event)) {
	r := u.open[gpu]
	if r == nil {
		return
	}
	delete(u.open, gpu)
	if r.clamp > 0 {
		r.ev.Util.Notes = append(r.ev.Util.Notes, fmt.Sprintf("%d values NVML gave above 100%% clamped to 100", r.clamp))
	}
	slices.SortFunc(r.ev.Util.Procs, func(a, b eventlog.UtilProcess) int { return cmp.Compare(a.PID, b.PID) })
	emit(r.ev)
}

// flush emits every open record, at a reader's request and at the stop.
func (u *utilRecords) flush(emit func(...eventlog.Event)) {
	for _, gpu := range u.order {
		u.close(gpu, emit)
	}
}
