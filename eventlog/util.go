package eventlog

import (
	"fmt"
	"slices"
	"strconv"
	"time"
)

// KindUtil is a record of NVML's utilization samples of one GPU or MIG
// instance, taken by watch at each --util-interval (Util holds them).
const KindUtil = "util"

// MaxUtilProcesses bounds the processes one sample of a util record keeps
// (the busiest), and the rest are counted in Util.More. A tenant decides
// how many processes it starts, and the record's size does not follow.
const MaxUtilProcesses = 64

// utilAbsent is a process's value in a sample it was not in.
const utilAbsent = "ff"

// Util is a run of samples of one GPU or MIG instance. Sample i was taken
// At[i] milliseconds after the record's Time, and -1 stands for a figure
// NVML did not report. The record is columnar, and a process's values a
// string, to keep the log small (docs/performance.md, watch, has its size).
type Util struct {
	GPU    string  `json:"gpu"`              // the UUID of the GPU or MIG instance (or devices[N] where unread)
	Parent string  `json:"parent,omitempty"` // a MIG instance's GPU
	At     []int64 `json:"at"`
	// SM and Mem are the device's own utilization (nvmlDeviceGetUtilizationRates)
	// in percent, and UsedMiB its memory used.
	SM      []int   `json:"sm"`
	Mem     []int   `json:"mem"`
	UsedMiB []int64 `json:"used_mib"`
	// Listed is how many processes NVML listed on it (compute, graphics and
	// MPS lists, and a GPU's MIG instances'), every one, past the 64 too. It
	// is -1 where the lists could not be read.
	Listed []int         `json:"listed"`
	Procs  []UtilProcess `json:"procs,omitempty"`
	// More counts the process samples left out past MaxUtilProcesses, over
	// the record's samples.
	More  int      `json:"more,omitempty"`
	Notes []string `json:"notes,omitempty"`
}

// UtilProcess is one process's samples in a util record. U holds four hex
// digits a sample, its SM then memory utilization in percent, or "ffff" in a
// sample it was not in. Each is the mean of NVML's samples in that
// interval, none being zero use.
type UtilProcess struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time,omitempty"` // 0 when gone before it could be read
	U         string `json:"u"`
}

// Key is the process's identity, PID@STARTTIME.
func (p *UtilProcess) Key() string { return fmt.Sprintf("%d@%d", p.PID, p.StartTime) }

// Len is the number of samples in the record.
func (u *Util) Len() int { return len(u.At) }

// SampleTime is when sample i was taken, the record being at t.
func (u *Util) SampleTime(t time.Time, i int) time.Time {
	return t.Add(time.Duration(u.At[i]) * time.Millisecond)
}

// Value is the process's SM and memory utilization in sample i. ok is
// false where it was not in that sample (or the record is damaged).
func (p *UtilProcess) Value(i int) (sm, mem int, ok bool) {
	if 4*i+4 > len(p.U) || p.U[4*i:4*i+2] == utilAbsent {
		return 0, 0, false
	}
	s, err1 := strconv.ParseUint(p.U[4*i:4*i+2], 16, 8)
	m, err2 := strconv.ParseUint(p.U[4*i+2:4*i+4], 16, 8)
	if err1 != nil || err2 != nil || s > 100 || m > 100 {
		return 0, 0, false
	}
	return int(s), int(m), true
}

// Append adds a sample's values (percent, 0 to 100) to U.
func (p *UtilProcess) Append(sm, mem int) {
	p.U += fmt.Sprintf("%02x%02x", min(max(sm, 0), 100), min(max(mem, 0), 100))
}

// AppendAbsent adds a sample the process was not in.
func (p *UtilProcess) AppendAbsent() { p.U += utilAbsent + utilAbsent }

// UtilSeries is one GPU's samples, decoded from its util records, as
// gpusnap events --util prints them.
type UtilSeries struct {
	GPU     string       `json:"gpu"`
	Parent  string       `json:"parent,omitempty"`
	Samples []UtilSample `json:"samples"`
	// More counts the process samples the records left out (past
	// MaxUtilProcesses a sample).
	More  int      `json:"more,omitempty"`
	Notes []string `json:"notes,omitempty"`
}

// UtilSample is one sample of a GPU, where -1 is a figure NVML did not report.
type UtilSample struct {
	Time      time.Time        `json:"time"`
	SM        int              `json:"sm"`
	Mem       int              `json:"mem"`
	UsedMiB   int64            `json:"used_mib"`
	Listed    int              `json:"listed"`
	Processes []UtilProcSample `json:"processes"`
}

// UtilProcSample is one process in a sample.
type UtilProcSample struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	SM        int    `json:"sm"`
	Mem       int    `json:"mem"`
}

// Series decodes the util records among events into each GPU's samples,
// in the order the GPUs first appear. gpu, when not "", keeps only that
// GPU (by UUID) and the MIG instances whose parent it is. A record whose
// columns disagree in length is read as far as all of them go.
func Series(events []Event, gpu string) []UtilSeries {
	var out []UtilSeries
	at := map[string]int{}
	for i := range events {
		e := &events[i]
		u := e.Util
		if e.Kind != KindUtil || u == nil || gpu != "" && u.GPU != gpu && u.Parent != gpu {
			continue
		}
		k, ok := at[u.GPU]
		if !ok {
			k = len(out)
			at[u.GPU] = k
			out = append(out, UtilSeries{GPU: u.GPU, Parent: u.Parent, Samples: []UtilSample{}})
		}
		s := &out[k]
		s.More += u.More
		for _, n := range u.Notes {
			if !slices.Contains(s.Notes, n) {
				s.Notes = append(s.Notes, n)
			}
		}
		n := min(len(u.At), len(u.SM), len(u.Mem), len(u.UsedMiB), len(u.Listed))
		for j := range n {
			smp := UtilSample{Time: u.SampleTime(e.Time, j), SM: u.SM[j], Mem: u.Mem[j], UsedMiB: u.UsedMiB[j], Listed: u.Listed[j],
				Processes: []UtilProcSample{}}
			for _, p := range u.Procs {
				if sm, mem, ok := p.Value(j); ok {
					smp.Processes = append(smp.Processes, UtilProcSample{PID: p.PID, StartTime: p.StartTime, SM: sm, Mem: mem})
				}
			}
			s.Samples = append(s.Samples, smp)
		}
	}
	return out
}
