package diff

import (
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
)

// utilProc is a process in utilEvents, its identity and its SM utilization
// at sample i (-1 when not on the GPU then).
type utilProc struct {
	pid   int
	start uint64
	sm    func(i int) int
}

// utilEvents are watch's util records of one GPU, n samples a second from
// 1 minute after FROM, the GPU's own SM utilization gpuSM(i) and NVML
// listing listed processes, in records of 30 samples as watch writes them.
func utilEvents(gpu string, n int, gpuSM func(int) int, listed int, procs ...utilProc) []eventlog.Event {
	var out []eventlog.Event
	for first := 0; first < n; first += 30 {
		u := &eventlog.Util{GPU: gpu}
		for i := first; i < min(first+30, n); i++ {
			u.At = append(u.At, int64(i-first)*1000)
			u.SM, u.Mem, u.UsedMiB, u.Listed = append(u.SM, gpuSM(i)), append(u.Mem, 10), append(u.UsedMiB, 70000), append(u.Listed, listed)
		}
		for _, p := range procs {
			up := eventlog.UtilProcess{PID: p.pid, StartTime: p.start}
			for i := first; i < min(first+30, n); i++ {
				if v := p.sm(i); v >= 0 {
					up.Append(v, 40)
				} else {
					up.AppendAbsent()
				}
			}
			u.Procs = append(u.Procs, up)
		}
		out = append(out, eventlog.Event{Time: t0.Add(time.Minute + time.Duration(first)*time.Second), Kind: eventlog.KindUtil, Source: "nvml", Util: u})
	}
	return out
}

// noise is a fixed pseudo-random sequence in [0, 1).
func noise(i int) float64 { return float64((i*7919+13)%1000) / 1000 }

func TestShapePatterns(t *testing.T) {
	flat := utilProc{pid: 100, start: 1, sm: func(i int) int { return 97 + i%3 }}
	training := utilProc{pid: 101, start: 2, sm: func(i int) int { return 45 + int(55*noise(i)) }}
	duty := utilProc{pid: 102, start: 3, sm: func(i int) int {
		if i/30%2 == 0 {
			return 98
		}
		return 0
	}}
	brief := utilProc{pid: 103, start: 4, sm: func(i int) int {
		if i < 10 {
			return 99
		}
		return -1
	}}
	events := utilEvents("GPU-0", 1800, func(int) int { return 99 }, 4, flat, training, duty, brief)
	r := compareWindow(Options{Events: eventsOf(events...)}, snap("from"), snap("to"))
	if r.Utilization == nil {
		t.Fatal("no utilization in the result")
	}
	want := map[string]string{"": PatternFlat, "100@1": PatternFlat, "101@2": PatternVaried, "102@3": PatternDutyCycled, "103@4": ""}
	for _, s := range r.Utilization.Shapes {
		if s.Pattern != want[s.Process] {
			t.Errorf("%q: pattern %q, want %q: %s", s.Process, s.Pattern, want[s.Process], s.Text())
		}
		t.Log(s.Text())
		switch s.Process {
		case "100@1":
			if s.Samples != 1800 || s.SMStdDev > 1 || s.ShareBusy != 1 || s.LongestBusy != 1800 || s.MemMean != 40 || s.MemMax != 40 {
				t.Errorf("flat: %+v", s)
			}
		case "101@2":
			if s.SMStdDev < 4.7 {
				t.Errorf("training σ %.1f", s.SMStdDev)
			}
		case "102@3":
			if s.LongestBusy != 30 || s.ShareBusy != 0.5 {
				t.Errorf("duty: %+v", s)
			}
		case "103@4":
			if s.Samples != 10 {
				t.Errorf("brief: %+v", s)
			}
		}
	}
	if len(r.Utilization.Series) != 1 || len(r.Utilization.Series[0].Points) == 0 || len(r.Utilization.Series[0].Points) > maxSeriesPoints {
		t.Fatalf("series: %+v", r.Utilization.Series)
	}
	if p := r.Utilization.Series[0].Points[0]; p.SM != 99 || p.UsedMiB != 70000 || p.Listed != 4 {
		t.Errorf("first point %+v", p)
	}
	// A window without samples has no utilization, as zero use is not a shape.
	if r := compareWindow(Options{Events: eventsOf()}, snap("from"), snap("to")); r.Utilization != nil {
		t.Errorf("empty window: %+v", r.Utilization)
	}
}

// The pattern is evidence on the process's findings and, flat, in its
// triage. Flat with masquerade evidence makes the finding high, while a
// tenant's own flat training raises nothing more than it did.
func TestShapeOnFindings(t *testing.T) {
	flat := func(int) int { return 98 }
	miner := proc(300, 30, "python3", "/tmp/.x/python3", mapping("/dev/nvidia0", "r--s", 0x7f0000000000, 4096, 0, "195:0"))
	trainer := proc(301, 31, "python3", "/usr/bin/python3.11", mapping("/dev/nvidia0", "r--s", 0x7f1000000000, 4096, 0, "195:0"))
	events := utilEvents("GPU-0", 600, flat, 2, utilProc{300, 30, flat}, utilProc{301, 31, flat})
	r := compareWindow(Options{Events: eventsOf(events...)}, snap("from"), snap("to", miner, trainer))
	sev := map[int]string{}
	for _, f := range r.Findings {
		if f.Kind != KindLeftoverDeviceMapping {
			continue
		}
		sev[f.Process.PID] = f.Severity.String()
		ev := strings.Join(f.Evidence, "\n")
		if !strings.Contains(ev, "compute pattern on GPU-0: flat, σ 0.0 over 600 samples, 100% at ≥ 90%") {
			t.Errorf("pid %d evidence: %q", f.Process.PID, f.Evidence)
		}
		if f.Triage == nil || !strings.Contains(strings.Join(f.Triage.Why, "\n"), "compute pattern on GPU-0: flat") {
			t.Errorf("pid %d triage: %+v", f.Process.PID, f.Triage)
		}
	}
	if sev[300] != "high" || sev[301] != "medium" {
		t.Errorf("severities: %v (want the masquerading miner high, the trainer medium)", sev)
	}
}
