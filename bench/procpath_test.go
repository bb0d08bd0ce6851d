package bench

import (
	"strconv"
	"testing"

	"github.com/gpusnap/gpusnap/bench/floor"
	"github.com/gpusnap/gpusnap/capture"
)

// BenchmarkProcPath is the /proc capture against the raw floor on a host of
// 575, 2,000 and 5,000 processes (sleeps are added up to the count), in one
// run, the two alternated so both meet the same load:
//
//	sudo go test -run x -bench ProcPath -benchtime 20x ./bench/
//
// proc/floor-cpu is the target (<= 1.5x): CPU, user and system, of this
// process (the kernel's work for it included), against the one-thread floor.
// It runs without the BPF path, so it holds on kernels that refuse it.
func BenchmarkProcPath(b *testing.B) {
	for _, n := range []int{575, 2000, 5000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			if extra := n - countProcesses(b); extra > 0 {
				startSleepers(b, extra)
			}
			w := floor.NewWalker()
			var fl, proc cost
			procs := 0
			for b.Loop() {
				fl.time(func() { walk(b, w) })
				proc.time(func() { procs = capturePath(b, capture.PathProc).Scan.ProcessesRead })
			}
			ms := func(d cost) float64 { return float64(d.cpu) / float64(b.N) / 1e6 }
			b.ReportMetric(float64(procs), "procs")
			b.ReportMetric(ms(fl), "floor-cpu-ms")
			b.ReportMetric(ms(proc), "proc-cpu-ms")
			b.ReportMetric(float64(proc.cpu)/float64(fl.cpu), "proc/floor-cpu")
			b.ReportMetric(float64(proc.wall)/float64(fl.wall), "proc/floor-wall")
		})
	}
}
