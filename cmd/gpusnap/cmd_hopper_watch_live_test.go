package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testwait"
)

// TestLiveHopperUnderWatch: a process that maps the node and forks and
// exits every 50-500 us hops for some seconds while gpusnap watch records,
// then is killed, and diff --tenant runs. Its lineage's fork, inherit and
// exit records are coalesced (a few a second, not three a hop), the diff's
// heap stays far below 256 MiB, and the verdict is not clean: the hopper's
// lineage is one transient_gpu_process of the node, high (a writable
// mapping), not one per PID.
func TestLiveHopperUnderWatch(t *testing.T) {
	livetest.Require(t, "losetup", "gcc")
	// The hopper makes this a noisy test. It owns the host before startWatch
	// shares it, since a test that holds the lock shared may not then own it.
	livetest.OwnNoisyHost(t)
	loop := livetest.NewLoop(t)
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	g := []string{"--db", db, "--no-nvml"}
	if code, _, errs := gpusnap(t, append([]string{"baseline", "--tenant", "hopper"}, g...)...); code != 0 {
		t.Fatalf("baseline: %s", errs)
	}
	startWatch(t, g...)
	const seconds = 8
	hopped := time.Now()
	reaper := livetest.Hop(t, loop.Node)
	time.Sleep(seconds * time.Second) // workload: the hopper hops under watch this long
	if err := syscall.Kill(-reaper.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Every hopper has exited once its group is empty; the diff then waits
	// for the log to reach its TO.
	testwait.Until(t, 20*time.Second, "the hoppers' process group to empty", func() bool {
		return errors.Is(syscall.Kill(-reaper.PID, 0), syscall.ESRCH)
	})
	// A loaded host stretches the lineage past its seconds: its records
	// are bounded by the time it really lived.
	lived := uint64(time.Since(hopped).Seconds()) + 1

	var peak uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	began := time.Now()
	code, out, errs := gpusnap(t, append([]string{"diff", "--tenant", "hopper", "--json"}, g...)...)
	took := time.Since(began)
	close(stop)
	<-sampled

	res, err := eventlog.ReadEvents(eventlog.JournalDir(db), time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	roots := map[string]bool{}
	for _, e := range res.Events {
		if e.Kind == eventlog.KindInherit && e.Device != nil && e.Device.Path == loop.Node {
			roots[e.Lineage] = true
		}
	}
	var records, hops uint64
	for _, e := range res.Events {
		if e.Lineage != "" && roots[e.Lineage] {
			records++
			if e.Kind == eventlog.KindExit {
				hops += max(e.Count, 1)
			}
		}
	}
	var logBytes int64
	entries, _ := os.ReadDir(eventlog.JournalDir(db))
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			logBytes += fi.Size()
		}
	}
	t.Logf("%d hops in %d lineage records (%d lineages); log %d bytes in all (other tests' device users too); diff %s, heap in use at most %.1f MiB",
		hops, records, len(roots), logBytes, took.Round(time.Millisecond), float64(peak)/(1<<20))
	if len(roots) == 0 || hops < seconds*100 {
		t.Fatalf("the log holds %d hops of the hopper's lineage: it did not hop under watch", hops)
	}
	if records > uint64(len(roots))*3*(lived+4) {
		t.Errorf("%d records for %d hops: a lineage's records are not coalesced", records, hops)
	}
	if peak > 256<<20 {
		t.Errorf("the diff's heap reached %.1f MiB", float64(peak)/(1<<20))
	}

	var r diff.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("diff: exit %d, %v: %s", code, err, errs)
	}
	lineage := 0
	for _, f := range r.Findings {
		if f.Kind == diff.KindTransientGPUProcess && f.Device == loop.Node {
			t.Logf("%s: %s", f.Severity, f.Summary)
			if slices.ContainsFunc(f.Evidence, func(e string) bool { return strings.HasPrefix(e, "a lineage of ") }) {
				lineage++
				if f.Severity != diff.High {
					t.Errorf("the lineage's finding is %s, want high: %+v", f.Severity, f)
				}
			}
		}
	}
	if code != exitFindings || lineage != len(roots) {
		t.Errorf("diff: exit %d, %d lineage findings for %d lineages; findings %d, notes %q", code, lineage, len(roots), len(r.Findings), r.Notes)
	}
}
