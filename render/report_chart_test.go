package render

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/diff"
)

const chartGPU = "GPU-3f2a0000-1111-2222-3333-444455556666"

// chartInput is testInput with an hour of watch's samples on the ghost's
// GPU: SM flat at 98% from minute 30 (the ghost's start), 30 GiB used, one
// interval no sample reported, and the ghost's own shape there.
func chartInput() BundleInput {
	in := testInput()
	start := in.Before.Host.CaptureStart
	s := diff.GPUSeries{GPU: chartGPU, Start: start, Step: time.Minute}
	for i := range 120 {
		p := diff.SeriesPoint{Offset: i, SM: 0, Mem: 0, UsedMiB: 0}
		if i >= 30 {
			p.SM, p.Mem, p.UsedMiB = 98, 40, 30720
		}
		if i == 60 {
			p.SM, p.Mem, p.UsedMiB = -1, -1, -1
		}
		s.Points = append(s.Points, p)
	}
	in.Result.Utilization = &diff.Utilization{
		Series: []diff.GPUSeries{s},
		Shapes: []diff.Shape{
			{GPU: chartGPU, Samples: 7200, SMMean: 73.5, SMStdDev: 42, Pattern: "intermittent"},
			{GPU: chartGPU, Process: "4243@987654", Samples: 5400, SMMean: 98, SMStdDev: 1.1, ShareBusy: 1, LongestBusy: 5400, Pattern: "flat"},
		},
	}
	return in
}

// TestChartPathsAndMarks: the SM path rises to 98% at minute 30, breaks at
// the interval with no sample, and the ghost, whose shape is on the GPU, is
// marked at its start and linked to its first finding; the miner, with no
// shape there, is not.
func TestChartPathsAndMarks(t *testing.T) {
	in := chartInput()
	r := newReport(in)
	if len(r.Charts) != 1 {
		t.Fatalf("%d charts, want 1", len(r.Charts))
	}
	c := r.Charts[0]
	if n := strings.Count(c.SM, "M"); n != 2 {
		t.Errorf("the SM path has %d pieces, want 2 (a gap at minute 60): %s", n, c.SM)
	}
	if n := strings.Count(c.SM, "L") + strings.Count(c.SM, "M"); n != 119 {
		t.Errorf("the SM path has %d points, want 119", n)
	}
	// Minute 29 at 0% is at the bottom (y 132), minute 30 at 98% near the top.
	if !strings.Contains(c.SM, "L"+coord(chartLeft+29.5/120*chartWidth)+" 132.0 L"+coord(chartLeft+30.5/120*chartWidth)+" 14.4") {
		t.Errorf("the SM path does not rise at minute 30: %s", c.SM)
	}
	if c.MemTop != "30720 MiB" {
		t.Errorf("memory axis top %q", c.MemTop)
	}
	want := []chartMark{{X: coord(chartLeft + 30.0/120*chartWidth), Label: "#2 4243", Anchor: "finding-2"}}
	if fmt.Sprint(c.Marks) != fmt.Sprint(want) {
		t.Errorf("marks %+v, want %+v", c.Marks, want)
	}
}

// TestChartMarksBounded: a tenant with 100 processes on the GPU gets
// maxChartMarks marks and the rest counted.
func TestChartMarksBounded(t *testing.T) {
	in := chartInput()
	u := in.Result.Utilization
	for i := range 100 {
		pid := 20000 + i
		in.Result.Findings = append(in.Result.Findings, diff.Finding{Kind: diff.KindUnexpectedGPUProcess, Severity: diff.High,
			Summary: "x", Process: &diff.ProcessRef{PID: pid, StartTime: 5, Started: in.Before.Host.CaptureStart}})
		u.Shapes = append(u.Shapes, diff.Shape{GPU: chartGPU, Process: fmt.Sprintf("%d@5", pid), Samples: 10})
	}
	c := newReport(in).Charts[0]
	if len(c.Marks) != maxChartMarks || c.Unmarked != 101-maxChartMarks {
		t.Errorf("%d marks and %d unmarked, want %d and %d", len(c.Marks), c.Unmarked, maxChartMarks, 101-maxChartMarks)
	}
}

// TestReportChartInChromium: the chart renders in headless Chromium under
// the report's policy (no console message), with its two paths and the
// ghost's mark linking to its finding.
func TestReportChartInChromium(t *testing.T) {
	page := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(page, pages(t, chartInput()).HTML, 0o644); err != nil {
		t.Fatal(err)
	}
	dom, console := chromium(t, page, "--dump-dom")
	if len(console) > 0 {
		t.Errorf("the report logged console messages:\n%s", strings.Join(console, "\n"))
	}
	for _, re := range []string{
		`<figure class="chart" id="chart-0" data-gpu="` + chartGPU + `">`,
		`<path class="sm" d="M[0-9. LM]+"`,
		`<path class="mem" d="M[0-9. LM]+"`,
		`<a href="#finding-2"><line class="mark"`,
		`>#2 4243</text>`,
		`intermittent`,
	} {
		if !regexp.MustCompile(re).MatchString(dom) {
			t.Errorf("the DOM lacks %s", re)
		}
	}
	screenshot(t, page, "bundle-report-chart.png", 1400)
}
