package capture_test

import (
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/internal/livetest"
)

// BenchmarkTriage is what triage's reads (sockets, lineage, exe hashes and
// dpkg packages of GPU users) add to a capture on a host of 500 processes,
// 10 of them GPU users running the packaged /usr/bin/python3 (the dearest
// dpkg lookup), as production captures (root, the live /proc, the path
// chosen as by default). Each round takes, in turn, a capture without
// triage, one with triage and the binary cache of the round before (the
// steady state of a host capturing again and again), and one with triage
// and no cache (every binary hashed, every path looked up). Reported:
// x-plain-cpu, the CPU time (user and system) of each over the capture
// without triage, and x-plain-wall its wall time; the target is cached
// x-plain-cpu <= 1.10.
//
//	go test -run x -bench Triage ./snapshot/
func BenchmarkTriage(b *testing.B) {
	livetest.Require(b)
	python, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		b.Fatalf("/usr/bin/python3: %v (.ci/run installs python3-minimal)", err)
	}
	loop := livetest.NewLoop(b)
	for range 10 {
		mapWithPython(b, python, loop.Node)
	}
	fillHost(b, 500)
	cached := capture.Options{BinaryCache: filepath.Join(b.TempDir(), "binaries")}
	arms := []struct {
		name string
		opts capture.Options
		cpu  time.Duration
		wall time.Duration
	}{
		{name: "plain", opts: capture.WithoutTriage(capture.Options{})},
		{name: "cached", opts: cached},
		{name: "uncached", opts: capture.Options{}},
	}
	snap, err := capture.Capture(b.Context(), cached) // fills the cache
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		for i := range arms {
			t0, cpu0 := time.Now(), processCPU(b)
			if _, err := capture.Capture(b.Context(), arms[i].opts); err != nil {
				b.Fatal(err)
			}
			arms[i].cpu += processCPU(b) - cpu0
			arms[i].wall += time.Since(t0)
		}
	}
	for _, a := range arms[1:] {
		b.ReportMetric(float64(a.cpu)/float64(arms[0].cpu), a.name+"-x-plain-cpu")
		b.ReportMetric(float64(a.wall)/float64(arms[0].wall), a.name+"-x-plain-wall")
	}
	for _, a := range arms {
		b.ReportMetric(float64(a.cpu)/float64(b.N)/float64(time.Millisecond), a.name+"-cpu-ms")
	}
	b.ReportMetric(float64(snap.Scan.ProcessesRead), "procs")
}

// fillHost starts sleep processes until the host runs about n processes;
// cleanup kills them by PID.
func fillHost(b *testing.B, n int) {
	b.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		b.Fatal(err)
	}
	for range n - len(dirs) {
		cmd := exec.Command("sleep", "3600")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
}

// processCPU is the CPU time (user and system) of every thread of this
// process so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
