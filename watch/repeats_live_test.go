package watch

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/livetest"
)

// floodScript opens and closes the node $1 for $2 seconds, 100 times every
// tenth of a second (a rate every other watch on a shared host keeps up
// with: its BPF programs see these opens too), then prints how many times it
// opened it; its first line is its PID. The pause is a read from a pipe that
// never has data (no process started per pause), whose writer it kills.
const floodScript = `echo $$; exec 5< <(exec sleep 60); sp=$!; n=0; end=$((SECONDS+$2))
while [ $SECONDS -lt $end ]; do
  for ((i = 0; i < 100; i++)); do exec 3<>"$1"; exec 3>&-; n=$((n+1)); done
  read -t 0.1 -u 5
done
kill $sp; echo $n`

// TestLiveOpenFloodCoalesced: two unprivileged processes open and close the
// node in a loop while watch records. Every one of their opens is in the
// log, counted in a few coalesced records (count, first and last time): a
// few records a second each, not one per open, and the watch's memory
// stays bounded.
func TestLiveOpenFloodCoalesced(t *testing.T) {
	livetest.Require(t, "setpriv", "bash")
	livetest.OwnNoisyHost(t)
	loop := nobodysLoop(t)
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	w := startWatch(t, db, Options{Mode: ModeBPF})
	const seconds = 4
	var floods []*exec.Cmd
	var outs []*strings.Builder
	for range 2 {
		var out strings.Builder
		cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c", floodScript, "flood", loop.Node, strconv.Itoa(seconds))
		cmd.Stdout = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		floods, outs = append(floods, cmd), append(outs, &out)
	}
	var peak uint64
	done := make(chan struct{})
	go func() {
		for _, c := range floods {
			c.Wait()
		}
		close(done)
	}()
	var ms runtime.MemStats
sample:
	for {
		select {
		case <-done:
			break sample
		case <-time.After(200 * time.Millisecond):
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
	}
	// Each flood's exit follows all its opens in the ring buffer: once it is
	// in the log, the watch has read them all, and its stop writes their
	// last coalesced records.
	var pids []int
	for _, out := range outs {
		first, _, _ := strings.Cut(out.String(), "\n")
		if pid, err := strconv.Atoi(first); err == nil {
			pids = append(pids, pid)
		}
	}
	w.waitLogged(t, "the floods' exits", logged(pids, eventlog.KindExit))
	stats := w.stop(t)
	res := readAll(t, db)
	var logBytes int64
	entries, _ := os.ReadDir(eventlog.JournalDir(db))
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			logBytes += fi.Size()
		}
	}
	for i, c := range floods {
		lines := strings.Fields(outs[i].String())
		if len(lines) != 2 || c.ProcessState.ExitCode() != 0 {
			t.Fatalf("flood %d: %q, %v", i, outs[i].String(), c.ProcessState)
		}
		pid, _ := strconv.Atoi(lines[0])
		opened, _ := strconv.ParseUint(lines[1], 10, 64)
		var recorded, records uint64
		for _, e := range res.Events {
			if e.Kind == eventlog.KindOpen && e.Process.PID == pid && e.Device.Path == loop.Node {
				recorded += max(e.Count, 1)
				records++
				if e.Count > 0 && (e.Last.Before(e.Time) || e.FD != nil) {
					t.Errorf("a coalesced record: %+v", e)
				}
			}
		}
		t.Logf("flood %d (pid %d): %d opens, %d recorded in %d records", i, pid, opened, recorded, records)
		if stats.Lost == 0 && recorded != opened || recorded == 0 {
			t.Errorf("flood %d: %d opens, %d recorded (%d lost in all)", i, opened, recorded, stats.Lost)
		}
		if records > 4*seconds+4 {
			t.Errorf("flood %d: %d records for %d s of repeats", i, records, seconds)
		}
	}
	// The log's size is only said: it holds what other tests' processes on
	// this host did meanwhile too.
	t.Logf("log %d bytes in all, %d lost, heap in use at most %.1f MiB", logBytes, stats.Lost, float64(peak)/(1<<20))
	if peak > 256<<20 {
		t.Errorf("heap in use reached %.1f MiB", float64(peak)/(1<<20))
	}
}

// nobodysLoop is a loop device's node named nvidia0 that user nobody may
// open read-write, with the directories to it.
func nobodysLoop(t *testing.T) *livetest.Loop {
	t.Helper()
	loop := livetest.NewLoop(t)
	for _, p := range []string{filepath.Dir(filepath.Dir(filepath.Dir(loop.Node))), filepath.Dir(filepath.Dir(loop.Node)), filepath.Dir(loop.Node)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(loop.Node, 0o666); err != nil {
		t.Fatal(err)
	}
	return loop
}

// TestLiveOpenFlood10k: unprivileged tenants open and close the node at
// 10,000 opens a second, paced (four processes at 2,500 each for 3 s), and
// one as fast as it can (100,000 opens), while 200 short-lived workers each
// open and map it once. The kernel counts the repeats in its runs: nothing
// is dropped, every open of every flood is counted in the log, in a few
// records a second, and every worker is in the log with its open, mapping
// and exit.
func TestLiveOpenFlood10k(t *testing.T) {
	livetest.OwnNoisyHost(t)
	loop := nobodysLoop(t)
	flood, burst := livetest.BuildFlood(t), livetest.BuildBurst(t)
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	w := startWatch(t, db, Options{Mode: ModeBPF})
	const paced, seconds = 4, 3
	var floods []*livetest.Flood
	for range paced {
		floods = append(floods, livetest.StartFlood(t, flood, 10000/paced, 10000/paced*seconds, loop.Node))
	}
	floods = append(floods, livetest.StartFlood(t, flood, 0, 100000, loop.Node))
	workers := livetest.Burst(t, burst, loop.Node, 200)
	opened := map[int]uint64{}
	var pids []int
	for _, f := range floods {
		pid, n := f.Wait(t)
		opened[pid] = n
		pids = append(pids, pid)
	}
	w.waitLogged(t, "the floods' and workers' exits", logged(append(pids, workers...), eventlog.KindExit))
	stats := w.stop(t)
	res := readAll(t, db)
	recorded, records := map[int]uint64{}, map[int]int{}
	for _, e := range res.Events {
		if e.Kind == eventlog.KindOpen && e.Device.Path == loop.Node {
			recorded[e.Process.PID] += max(e.Count, 1)
			records[e.Process.PID]++
		}
	}
	if stats.Lost != 0 {
		t.Errorf("%d events lost", stats.Lost)
	}
	for _, pid := range pids {
		t.Logf("flood pid %d: %d opens, %d recorded in %d records", pid, opened[pid], recorded[pid], records[pid])
		if recorded[pid] != opened[pid] {
			t.Errorf("flood pid %d: %d opens, %d recorded", pid, opened[pid], recorded[pid])
		}
		if records[pid] > 3*seconds+4 {
			t.Errorf("flood pid %d: %d records for %d s of repeats", pid, records[pid], seconds)
		}
	}
	events := byPID(res.Events)
	for _, pid := range workers {
		kinds := map[string]bool{}
		for _, e := range events[pid] {
			kinds[e.Kind] = true
		}
		if !kinds[eventlog.KindOpen] || !kinds[eventlog.KindMmap] || !kinds[eventlog.KindExit] {
			t.Errorf("worker %d: recorded %v, want its open, mapping and exit", pid, kinds)
		}
	}
	t.Logf("%d records in all, %d lost", len(res.Events), stats.Lost)
}
