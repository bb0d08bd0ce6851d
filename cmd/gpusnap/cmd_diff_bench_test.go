package main

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkDiffTenantVsSnapshot runs `gpusnap snapshot` and `gpusnap diff
// --tenant` in turn on this host's /proc (no NVML), each into the same store,
// and reports their mean times and the ratio diff/snapshot (target <= 1.5).
// Taking turns, both meet the same noise. bench/diff.sh does the same with
// hyperfine and 500 extra processes.
func BenchmarkDiffTenantVsSnapshot(b *testing.B) {
	db := filepath.Join(b.TempDir(), "gpusnap.db")
	cli := func(args ...string) (time.Duration, int) {
		start := time.Now()
		code := run(context.Background(), append([]string{"gpusnap", "--no-nvml", "--db", db}, args...), io.Discard, io.Discard)
		return time.Since(start), code
	}
	if _, code := cli("baseline", "--tenant", "bench"); code != 0 {
		b.Fatalf("baseline: exit %d", code)
	}
	var snap, diff time.Duration
	for b.Loop() {
		d, code := cli("snapshot")
		if code != 0 {
			b.Fatalf("snapshot: exit %d", code)
		}
		snap += d
		d, code = cli("diff", "--tenant", "bench")
		if code == 2 {
			b.Fatal("diff: exit 2")
		}
		diff += d
	}
	n := float64(b.N)
	b.ReportMetric(float64(snap.Nanoseconds())/n, "ns/snapshot")
	b.ReportMetric(float64(diff.Nanoseconds())/n, "ns/diff")
	b.ReportMetric(float64(diff)/float64(snap), "diff/snapshot")
}
