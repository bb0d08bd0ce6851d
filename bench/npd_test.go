package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// npdTimeout is Node Problem Detector's default plugin timeout: a check that
// runs past it is killed and its verdict lost.
const npdTimeout = 5 * time.Second

// BenchmarkCheckNPD runs `gpusnap check --npd` as NPD does, the built
// command under NPD's timeout, on this host topped up to 5,000 processes
// with sleeps, by each capture path, and fails when a run takes NPD's 5 s:
//
//	sudo go test -run x -bench CheckNPD -benchtime 5x ./bench/
func BenchmarkCheckNPD(b *testing.B) {
	bin := buildGpusnap(b, b.TempDir())
	if n := 5000 - countProcesses(b); n > 0 {
		startSleepers(b, n)
	}
	procs := countProcesses(b)
	// Both capture paths: the BPF iterators where the kernel loads them, and /proc.
	for _, path := range []string{"auto", "proc"} {
		b.Run(path, func(b *testing.B) { checkNPD(b, bin, path, procs) })
	}
}

// buildGpusnap builds the command into dir and returns its path.
func buildGpusnap(b *testing.B, dir string) string {
	bin := filepath.Join(dir, "gpusnap")
	gobin, err := exec.LookPath("go")
	if err != nil {
		b.Fatalf("go is not on PATH, to build the command: %v", err)
	}
	if out, err := exec.Command(gobin, "build", "-o", bin, "../cmd/gpusnap").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// checkNPD runs check --npd by one capture path and reports its worst run.
func checkNPD(b *testing.B, bin, path string, procs int) {
	var worst time.Duration
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), npdTimeout)
		start := time.Now()
		out, err := exec.CommandContext(ctx, bin, "--no-nvml", "--capture", path, "check", "--npd").Output()
		took := time.Since(start)
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			b.Fatalf("check --npd on %d processes: killed at NPD's timeout %s: %q", procs, npdTimeout, out)
		}
		if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() > 1) {
			b.Fatalf("check --npd: %v: %s", err, out)
		}
		worst = max(worst, took)
	}
	b.ReportMetric(float64(procs), "processes")
	b.ReportMetric(worst.Seconds(), "worst-s")
	b.ReportMetric(worst.Seconds()/npdTimeout.Seconds(), "worst/npd-timeout")
}

// countProcesses counts the host's processes in /proc.
func countProcesses(b *testing.B) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if strings.Trim(e.Name(), "0123456789") == "" {
			n++
		}
	}
	return n
}
