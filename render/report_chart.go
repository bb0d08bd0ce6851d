package render

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/safetext"
)

// The plot area of a GPU's chart, in the SVG's own units.
const (
	chartLeft, chartTop     = 44.0, 12.0
	chartWidth, chartHeight = 660.0, 120.0
	// maxChartMarks bounds the processes marked on one chart, since a
	// tenant controls how many findings there are. The rest are counted.
	maxChartMarks = 24
)

// chart is one GPU's (or MIG instance's) utilization over the window, as
// inline SVG of paths and lines only, so the report's policy (no script, no
// load) holds and the page still reads offline.
type chart struct {
	ID       string // for the element's id, the GPU's index among the charts
	GPU      string // escaped
	Parent   string // a MIG instance's GPU, escaped
	From, To string // the window's first and last bucket, as times
	SM       string // the path of SM utilization, 0-100%
	Mem      string // the path of memory used, 0 to MemTop
	MemTop   string // what the top of the memory axis is
	Marks    []chartMark
	Unmarked int // processes with findings on this GPU past maxChartMarks
	Summary  string
}

// chartMark places a process a finding names on its GPU's chart, at its
// start (or the window's first bucket, for one started before).
type chartMark struct {
	X      string
	Label  string
	Anchor string // the finding's id in the page
}

// charts draws each GPU series of the diff's utilization, marking the
// processes of the findings (numbered as the report numbers them) that
// watch's samples place on that GPU.
func charts(u *diff.Utilization, groups []group) []chart {
	if u == nil {
		return nil
	}
	var out []chart
	for i, s := range u.Series {
		if len(s.Points) == 0 || s.Step <= 0 {
			continue
		}
		c := chart{ID: strconv.Itoa(i), GPU: safetext.Escape(s.GPU), Parent: safetext.Escape(s.Parent)}
		buckets := s.Points[len(s.Points)-1].Offset + 1
		x := func(bucket float64) float64 { return chartLeft + (bucket+0.5)/float64(buckets)*chartWidth }
		c.From = formatTime(s.Start)
		c.To = formatTime(s.Start.Add(time.Duration(buckets) * s.Step))
		maxUsed := 0.0
		for _, p := range s.Points {
			maxUsed = max(maxUsed, p.UsedMiB)
		}
		c.SM = chartPath(s.Points, x, func(p diff.SeriesPoint) float64 { return p.SM }, 100)
		if maxUsed > 0 {
			c.Mem = chartPath(s.Points, x, func(p diff.SeriesPoint) float64 { return p.UsedMiB }, maxUsed)
			c.MemTop = fmt.Sprintf("%.0f MiB", maxUsed)
		} else {
			c.Mem = chartPath(s.Points, x, func(p diff.SeriesPoint) float64 { return p.Mem }, 100)
			c.MemTop = "100% (memory utilization)"
		}
		// A mark is an instant, so it sits at the left edge of its bucket,
		// where x gives a bucket's middle.
		c.mark(u, s, groups, func(at float64) float64 {
			return chartLeft + min(max(at, 0), float64(buckets))/float64(buckets)*chartWidth
		})
		c.Summary = chartSummary(u, s.GPU)
		out = append(out, c)
	}
	return out
}

// mark places each finding's process that has a shape on s's GPU, at x of
// its start (in buckets from the series' start), each process once.
func (c *chart) mark(u *diff.Utilization, s diff.GPUSeries, groups []group, x func(float64) float64) {
	seen := map[string]bool{}
	for _, g := range groups {
		for _, f := range g.Findings {
			p := f.process
			if p == nil || seen[p.Key()] || !onGPU(u, s.GPU, p) {
				continue
			}
			seen[p.Key()] = true
			if len(c.Marks) == maxChartMarks {
				c.Unmarked++
				continue
			}
			at := float64(p.Started.Sub(s.Start)) / float64(s.Step)
			c.Marks = append(c.Marks, chartMark{X: coord(x(at)), Label: fmt.Sprintf("#%d %d", f.N, p.PID), Anchor: "finding-" + strconv.Itoa(f.N)})
		}
	}
}

// chartPath is the SVG path of value over the points, 0 at the bottom and
// top at the top of the plot. A bucket no sample reported (-1) breaks it.
func chartPath(points []diff.SeriesPoint, x func(float64) float64, value func(diff.SeriesPoint) float64, top float64) string {
	var b strings.Builder
	pen := false
	last := -2
	for _, p := range points {
		v := value(p)
		if v < 0 {
			pen = false
			continue
		}
		y := chartTop + (1-min(v, top)/top)*chartHeight
		cmd := "L"
		if !pen || p.Offset != last+1 {
			cmd = "M"
		}
		fmt.Fprintf(&b, "%s%s %s ", cmd, coord(x(float64(p.Offset))), coord(y))
		pen, last = true, p.Offset
	}
	return strings.TrimSpace(b.String())
}

func coord(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// onGPU reports whether watch's samples place the process on the GPU, that
// is, whether it has a shape there.
func onGPU(u *diff.Utilization, gpu string, p *diff.ProcessRef) bool {
	key := p.Key()
	for _, s := range u.Shapes {
		if s.GPU == gpu && s.Process == key {
			return true
		}
	}
	return false
}

// chartSummary is the GPU's own shape in words, the chart's caption.
func chartSummary(u *diff.Utilization, gpu string) string {
	for i := range u.Shapes {
		if s := &u.Shapes[i]; s.GPU == gpu && s.Process == "" {
			return safetext.Escape(s.Text())
		}
	}
	return ""
}
