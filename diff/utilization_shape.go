package diff

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

// The patterns of a compute shape (docs/diff.md, Utilization).
const (
	PatternFlat       = "flat"        // busy and steady, a miner's signature (training also runs flat)
	PatternDutyCycled = "duty_cycled" // on and off, a miner that pauses or a job between batches
	PatternVaried     = "varied"      // busy, not steady, as training and inference run
	PatternIdle       = "idle"        // barely used
)

// Thresholds of the patterns, in percent of SM utilization and samples.
const (
	minShapeSamples = 30  // fewer say no pattern
	busyAt          = 90  // a sample at or above it is busy
	flatStdDev      = 3.0 // σ at or below it, with mean at least flatMinMean, is flat
	flatMinMean     = 50.0
	idleMean        = 5.0  // mean below it is idle
	dutyOffAt       = 10   // a sample at or below it is off
	dutyShare       = 0.2  // duty-cycled means at least this share busy and this share off ...
	dutyMinRuns     = 2    // ... in at least this many busy runs
	maxShapes       = 4096 // processes × GPUs kept, since a tenant decides how many processes it starts
	maxSeriesPoints = 720  // points a GPU's chart series holds, one every 5 s of an hour
	maxSeriesGPUs   = 256  // GPUs and MIG instances a window's series holds
)

// Shape is how a process (or a whole GPU, Process empty) used one GPU
// over the window. It holds SM utilization's mean, standard deviation,
// share and longest run at 90% or more, and memory, which is a process's
// memory utilization in percent or a GPU's memory used in MiB.
type Shape struct {
	GPU          string  `json:"gpu"`
	Process      string  `json:"process,omitempty"` // PID@STARTTIME
	Samples      int     `json:"samples"`
	SMMean       float64 `json:"sm_mean"`
	SMStdDev     float64 `json:"sm_stddev"`
	ShareBusy    float64 `json:"share_at_90"`       // 0 to 1
	LongestBusy  int     `json:"longest_run_at_90"` // samples
	MemMean      float64 `json:"mem_mean"`
	MemMax       float64 `json:"mem_max"`
	Pattern      string  `json:"pattern,omitempty"` // empty under 30 samples
	offs, runs   int
	run          int
	sum, sumSq   float64
	memSum       float64
	memN         int
	lastSample   int // the index, in its GPU's series, of the last sample taken
	busyWithout  int // a GPU's current run of busy samples with no process listed
	longestAlone int
	aloneFrom    time.Time // the start of the current run (busyWithout), or of the longest
	aloneTo      time.Time
	longestFrom  time.Time
	lastAt       time.Time // the last sample's time
}

// Text is the shape as triage says it, such as
//
//	compute pattern: flat, σ 1.8 over 1,800 samples, 98% at ≥ 90%
func (s *Shape) Text() string {
	mem := fmt.Sprintf("memory utilization mean %.1f%%, max %.0f%%", s.MemMean, s.MemMax)
	if s.Process == "" {
		mem = fmt.Sprintf("memory used mean %s MiB, max %s MiB", thousands(int(s.MemMean)), thousands(int(s.MemMax)))
	}
	return fmt.Sprintf("compute pattern on %s: %s, σ %.1f over %s samples, %.0f%% at ≥ %d%% (longest run %s), SM mean %.1f%%, %s",
		s.GPU, cmp.Or(s.Pattern, "too few samples for a pattern"), s.SMStdDev, thousands(s.Samples), 100*s.ShareBusy, busyAt,
		thousands(s.LongestBusy), s.SMMean, mem)
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// add takes one sample, sm in percent and mem (-1 not reported).
// consecutive says it follows this shape's last sample in its GPU's series.
func (s *Shape) add(sm, mem float64, consecutive bool) {
	s.Samples++
	s.sum += sm
	s.sumSq += sm * sm
	if mem >= 0 {
		s.memSum += mem
		s.memN++
		s.MemMax = max(s.MemMax, mem)
	}
	if !consecutive {
		s.run = 0
	}
	switch {
	case sm >= busyAt:
		if s.run == 0 {
			s.runs++
		}
		s.run++
		s.ShareBusy++
		s.LongestBusy = max(s.LongestBusy, s.run)
	default:
		s.run = 0
		if sm <= dutyOffAt {
			s.offs++
		}
	}
}

// finish computes the figures and the pattern.
func (s *Shape) finish() {
	n := float64(s.Samples)
	if n == 0 {
		return
	}
	s.SMMean = s.sum / n
	s.SMStdDev = math.Sqrt(max(0, s.sumSq/n-s.SMMean*s.SMMean))
	busy := s.ShareBusy
	s.ShareBusy = busy / n
	if s.memN > 0 {
		s.MemMean = s.memSum / float64(s.memN)
	}
	switch {
	case s.Samples < minShapeSamples:
	case s.SMMean < idleMean:
		s.Pattern = PatternIdle
	case s.SMStdDev <= flatStdDev && s.SMMean >= flatMinMean:
		s.Pattern = PatternFlat
	case busy >= dutyShare*n && float64(s.offs) >= dutyShare*n && s.runs >= dutyMinRuns:
		s.Pattern = PatternDutyCycled
	default:
		s.Pattern = PatternVaried
	}
	s.SMMean, s.SMStdDev = round1(s.SMMean), round1(s.SMStdDev)
	s.MemMean, s.ShareBusy = round1(s.MemMean), math.Round(s.ShareBusy*1000)/1000
}

func round1(f float64) float64 { return math.Round(f*10) / 10 }

// Utilization is what watch's samples show of the window. It holds each
// process's and GPU's shape, and each GPU's series, bucketed to at most 720
// points, for a chart (SM and memory utilization in percent, memory used in
// MiB, the most processes NVML listed in the bucket).
type Utilization struct {
	Shapes []Shape     `json:"shapes"`
	Series []GPUSeries `json:"series"`
	Notes  []string    `json:"notes,omitempty"`
	gpus   map[string]*gpuWalk
}

// GPUSeries is one GPU's (or MIG instance's) samples over the window, in
// buckets of Step from Start. Point i covers [Start+i*Step, Start+(i+1)*Step).
type GPUSeries struct {
	GPU    string        `json:"gpu"`
	Parent string        `json:"parent,omitempty"`
	Start  time.Time     `json:"start"`
	Step   time.Duration `json:"step_ns"`
	Points []SeriesPoint `json:"points"`
}

// SeriesPoint is one bucket of a GPUSeries, the means of its samples, with
// -1 where none reported the figure.
type SeriesPoint struct {
	Offset  int     `json:"i"` // bucket index
	SM      float64 `json:"sm"`
	Mem     float64 `json:"mem"`
	UsedMiB float64 `json:"used_mib"`
	Listed  int     `json:"listed"`
	n       [3]int
}

// gpuWalk is one GPU's state while the window is walked.
type gpuWalk struct {
	shape  *Shape
	procs  map[string]*Shape
	series *GPUSeries
	index  int // samples of this GPU so far
}

// utilization walks the window's util records once (cached).
func (c *comparison) utilization() *Utilization {
	if c.util != nil {
		return c.util
	}
	u := &Utilization{gpus: map[string]*gpuWalk{}}
	c.util = u
	from, to := c.since, c.windowEnd()
	step := max(time.Second, to.Sub(from)/maxSeriesPoints)
	shapes, dropped := 0, 0
	c.eachEvent(func(e *eventlog.Event) {
		if e.Kind != eventlog.KindUtil || e.Util == nil {
			return
		}
		r := e.Util
		g := u.gpus[r.GPU]
		if g == nil {
			if len(u.gpus) >= maxSeriesGPUs {
				dropped++
				return
			}
			g = &gpuWalk{shape: &Shape{GPU: r.GPU}, procs: map[string]*Shape{},
				series: &GPUSeries{GPU: r.GPU, Parent: r.Parent, Start: from, Step: step}}
			u.gpus[r.GPU] = g
		}
		for i := 0; i < r.Len() && i < len(r.SM) && i < len(r.Mem) && i < len(r.UsedMiB) && i < len(r.Listed); i++ {
			at := r.SampleTime(e.Time, i)
			if at.Before(from) || !at.Before(to) {
				continue
			}
			g.index++
			g.point(int(at.Sub(from)/step), r, i)
			if r.SM[i] >= 0 {
				g.shape.add(float64(r.SM[i]), float64(r.UsedMiB[i]), g.shape.lastSample == g.index-1)
				g.shape.lastSample = g.index
			}
			g.shape.alone(r.SM[i], r.Listed[i], at)
			for k := range r.Procs {
				sm, mem, ok := r.Procs[k].Value(i)
				if !ok {
					continue
				}
				key := r.Procs[k].Key()
				s := g.procs[key]
				if s == nil {
					if shapes >= maxShapes {
						dropped++
						continue
					}
					shapes++
					s = &Shape{GPU: r.GPU, Process: key}
					g.procs[key] = s
				}
				s.add(float64(sm), float64(mem), s.lastSample == g.index-1)
				s.lastSample = g.index
			}
		}
	})
	if dropped > 0 {
		u.Notes = append(u.Notes, fmt.Sprintf("%d samples of processes or GPUs past the first %d processes and %d GPUs were not shaped", dropped, maxShapes, maxSeriesGPUs))
	}
	for _, id := range slices.Sorted(maps.Keys(u.gpus)) {
		g := u.gpus[id]
		g.shape.finish()
		u.Shapes = append(u.Shapes, *g.shape)
		for _, key := range slices.Sorted(maps.Keys(g.procs)) {
			g.procs[key].finish()
			u.Shapes = append(u.Shapes, *g.procs[key])
		}
		for i := range g.series.Points {
			g.series.Points[i].finish()
		}
		u.Series = append(u.Series, *g.series)
	}
	return u
}

// point adds sample i of r to bucket b of the series.
func (g *gpuWalk) point(b int, r *eventlog.Util, i int) {
	s := g.series
	if n := len(s.Points); n == 0 || s.Points[n-1].Offset != b {
		if n >= maxSeriesPoints {
			return
		}
		s.Points = append(s.Points, SeriesPoint{Offset: b, Listed: r.Listed[i]})
	}
	p := &s.Points[len(s.Points)-1]
	for k, v := range []float64{float64(r.SM[i]), float64(r.Mem[i]), float64(r.UsedMiB[i])} {
		if v >= 0 {
			*p.field(k) += v
			p.n[k]++
		}
	}
	p.Listed = max(p.Listed, r.Listed[i])
}

func (p *SeriesPoint) field(k int) *float64 {
	return [...]*float64{&p.SM, &p.Mem, &p.UsedMiB}[k]
}

func (p *SeriesPoint) finish() {
	for k := range 3 {
		f := p.field(k)
		if p.n[k] == 0 {
			*f = -1
		} else {
			*f = round1(*f / float64(p.n[k]))
		}
	}
}

// alone tracks, on a GPU's shape, the longest run of samples at
// busyAlone or more while NVML listed no process on it.
// A sample not reported, or whose lists were not read, ends a run.
func (s *Shape) alone(sm, listed int, at time.Time) {
	s.lastAt = at
	if sm < busyAlone || listed != 0 {
		s.busyWithout = 0
		return
	}
	if s.busyWithout == 0 {
		s.aloneFrom = at
	}
	s.busyWithout++
	if s.busyWithout > s.longestAlone {
		s.longestAlone, s.longestFrom, s.aloneTo = s.busyWithout, s.aloneFrom, at
	}
}

// busyAlone is the utilization at or above which a GPU with no process is busy.
const busyAlone = 50

// shapesOf are the shapes of the process key, busiest GPU first.
func (u *Utilization) shapesOf(key string) []Shape {
	var out []Shape
	for _, s := range u.Shapes {
		if s.Process == key {
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b Shape) int { return cmp.Compare(b.SMMean, a.SMMean) })
	return out
}

// attachShapes puts each finding's process's compute pattern in its
// evidence and, where flat, in its triage's why. A flat pattern with
// masquerade evidence makes the finding high. A pattern raises no finding
// of its own, since training runs flat too.
func (c *comparison) attachShapes(findings []Finding) {
	u := c.utilization()
	if len(u.Shapes) == 0 {
		return
	}
	for i := range findings {
		f := &findings[i]
		if f.Process == nil {
			continue
		}
		for _, s := range u.shapesOf(f.Process.Key()) {
			if f.GPUUUID != "" && s.GPU != f.GPUUUID {
				continue
			}
			f.Evidence = append(f.Evidence, s.Text())
			if s.Pattern != PatternFlat {
				continue
			}
			if f.Triage != nil {
				f.Triage.Why = append(f.Triage.Why, s.Text())
			}
			p := c.toByKey[idOf(f.Process.PID, f.Process.StartTime)]
			if p == nil {
				p = &snapshot.Process{PID: f.Process.PID, Comm: f.Process.Comm, Exe: f.Process.Exe, ExeDeleted: f.Process.ExeDeleted}
			}
			if f.Allowed == "" && f.Severity < High && len(masquerade(p)) > 0 {
				f.Severity = High
				f.Evidence = append(f.Evidence, "a flat compute pattern with masquerade evidence: high")
			}
		}
	}
}

// utilizationResult is the window's utilization for the result, nil
// where it holds no samples.
func (c *comparison) utilizationResult() *Utilization {
	if u := c.utilization(); len(u.Series) > 0 || len(u.Notes) > 0 {
		return u
	}
	return nil
}
