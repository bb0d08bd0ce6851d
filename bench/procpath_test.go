package bench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/bench/floor"
	"github.com/gpusnap/gpusnap/capture"
)

// BenchmarkProcPath is the /proc capture against the raw floor on a host of
// 600, 2,000, 5,000 and 20,000 processes (sleeps are added up to the count; set
// PROCPATH_SIZES, e.g. "20000", for others), in one run, the floor, the
// capture without a process cache and the capture with the caches the one
// before it left beside a store (process and binary), alternated so all
// meet the same load:
//
//	sudo go test -run x -bench ProcPath -benchtime 20x ./bench/
//
// proc/floor-cpu and cached/floor-cpu are CPU, user and system, of this
// process (the kernel's work for it included), against the one-thread floor
// over all rounds; -min, -median and -max are of the rounds' own ratios, which a
// shared host's load moves less. It runs without the BPF path, so it holds
// on kernels that refuse it.
func BenchmarkProcPath(b *testing.B) {
	sizes := []int{600, 2000, 5000, 20000}
	if s := os.Getenv("PROCPATH_SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Fields(s) {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatalf("PROCPATH_SIZES: %q is no count", f)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			if extra := n - countProcesses(b); extra > 0 {
				startSleepers(b, extra)
			}
			benchProcPath(b)
		})
	}
}

func benchProcPath(b *testing.B) {
	w := floor.NewWalker()
	dir := b.TempDir() // a store's directory: the caches a capture keeps beside it
	cache := capture.Options{Path: capture.PathProc, ProcessCache: filepath.Join(dir, "processes"), BinaryCache: filepath.Join(dir, "binaries")}
	captureCached(b, cache) // the cache a store's last capture leaves
	var fl, proc, cached cost
	var procRatio, cachedRatio []float64
	procs := 0
	for b.Loop() {
		var round [3]cost
		round[0].time(func() { walk(b, w) })
		round[1].time(func() { procs = capturePath(b, capture.PathProc).Scan.ProcessesRead })
		round[2].time(func() { captureCached(b, cache) })
		fl, proc, cached = fl.plus(round[0]), proc.plus(round[1]), cached.plus(round[2])
		procRatio = append(procRatio, float64(round[1].cpu)/float64(round[0].cpu))
		cachedRatio = append(cachedRatio, float64(round[2].cpu)/float64(round[0].cpu))
	}
	ms := func(d cost) float64 { return float64(d.cpu) / float64(b.N) / 1e6 }
	b.ReportMetric(float64(procs), "procs")
	b.ReportMetric(ms(fl), "floor-cpu-ms")
	b.ReportMetric(ms(proc), "proc-cpu-ms")
	b.ReportMetric(ms(cached), "cached-cpu-ms")
	b.ReportMetric(float64(proc.cpu)/float64(fl.cpu), "proc/floor-cpu")
	b.ReportMetric(float64(proc.wall)/float64(fl.wall), "proc/floor-wall")
	b.ReportMetric(float64(cached.cpu)/float64(fl.cpu), "cached/floor-cpu")
	b.ReportMetric(float64(cached.wall)/float64(fl.wall), "cached/floor-wall")
	b.ReportMetric(slices.Min(cachedRatio), "cached/floor-cpu-min")
	b.ReportMetric(slices.Max(cachedRatio), "cached/floor-cpu-max")
	b.ReportMetric(median(cachedRatio), "cached/floor-cpu-median")
	b.ReportMetric(median(procRatio), "proc/floor-cpu-median")
}

// captureCached is a /proc capture with the process cache of opts, which it
// leaves for the next.
func captureCached(b *testing.B, opts capture.Options) {
	s, err := capture.Capture(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range s.Scan.Errors {
		if strings.HasPrefix(e, "process cache") {
			b.Fatal(e)
		}
	}
}

func (c cost) plus(d cost) cost { return cost{c.cpu + d.cpu, c.wall + d.wall} }

// median is the middle of xs (the mean of the two middle ones for an even count).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
