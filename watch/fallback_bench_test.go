package watch

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/nvmlread"
)

// fallbackIdleSpan is how long each fallback runs idle while its CPU is measured.
const fallbackIdleSpan = 20 * time.Second

// fallbackRuns are BenchmarkFallbackIdle's ways of running the fallback:
// the connector taken as heard but not subscribed (no process is named: a
// host that starts none), the connector heard (this host's own activity
// named), and the connector refused (the rescans of before).
var fallbackRuns = []string{"idle", "connector", "periodic"}

// BenchmarkFallbackIdle starts 5,000 sleep processes and runs the fallback's
// event loop on the live /proc, as watch does, each of fallbackRuns in turn;
// each runs for fallbackIdleSpan once its first rescan is done and the sleeps
// are no longer young. The figures are the process's CPU (user + system) in
// that span, as a share of one core; the sleeps are started before and cost
// nothing while they sleep. host-forks/s is the host's own activity
// meanwhile (/proc/stat), which the connector names.
//
//	sudo go test -run x -bench FallbackIdle -benchtime 1x ./watch/
func BenchmarkFallbackIdle(b *testing.B) {
	livetest.Require(b)
	for range 5000 {
		c := exec.Command("sleep", "3600")
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	}
	cpu := map[string]time.Duration{}
	f0, t0 := hostForks(b), time.Now()
	for range b.N {
		for _, run := range fallbackRuns {
			cpu[run] += idleFallback(b, run)
		}
	}
	b.ReportMetric((hostForks(b)-f0)/time.Since(t0).Seconds(), "host-forks/s")
	for _, run := range fallbackRuns {
		b.ReportMetric(100*cpu[run].Seconds()/(float64(b.N)*fallbackIdleSpan.Seconds()), run+"-%core")
		b.ReportMetric(float64(cpu[run].Milliseconds())/float64(b.N), run+"-cpu-ms")
	}
	b.ReportMetric(float64(countPIDs(b)), "procs")
}

// idleFallback runs a fallback's event loop on /proc as run says (one of
// fallbackRuns), and returns its CPU over fallbackIdleSpan.
func idleFallback(b *testing.B, run string) time.Duration {
	proc, err := capture.OpenProcRoot("/proc")
	if err != nil {
		b.Fatal(err)
	}
	defer proc.Close()
	j, err := eventlog.OpenJournal(filepath.Join(b.TempDir(), "log"))
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	r := &recorder{j: j, metrics: noMetrics{}, stats: Stats{Events: map[string]int{}}, log: b.Output(), repeats: newRepeats()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fb := newFallbackSource(proc, DefaultInterval)
	switch run {
	case "idle":
		fb.heard = true
	case "connector":
		if err := fb.listen(ctx, r.lostNote); err != nil {
			b.Fatal(err)
		}
	}
	opts := Options{Interval: DefaultInterval, UtilInterval: DefaultUtilInterval, Retain: DefaultRetain, Log: b.Output()}
	el := &eventLoop{opts: opts, j: j, r: r, fb: fb, nv: newNVMLPoll(nvmlread.Options{Disabled: true}, proc), mode: ModeFallback}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = el.serve(ctx, nil)
	}()
	// The first rescan reads every process; the sleeps stay young for
	// youngTicks intervals after they started.
	time.Sleep((youngTicks + 2) * DefaultInterval) // workload: the sleeps age past young
	cpu0 := cpuTime()
	time.Sleep(fallbackIdleSpan) // workload: the idle span measured
	cpu := cpuTime() - cpu0
	cancel()
	<-done
	return cpu
}

// hostForks is how many processes and threads the host has started since boot.
func hostForks(b *testing.B) float64 {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	for line := range bytes.Lines(stat) {
		if rest, ok := bytes.CutPrefix(line, []byte("processes ")); ok {
			n, err := strconv.ParseFloat(string(bytes.TrimSpace(rest)), 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no processes line in /proc/stat")
	return 0
}

func countPIDs(b *testing.B) int {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		b.Fatal(err)
	}
	return len(dirs)
}
