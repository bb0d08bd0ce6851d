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
	loop := livetest.NewLoop(t)
	// The test's own node, and the directories to it, for user nobody.
	for _, p := range []string{filepath.Dir(filepath.Dir(filepath.Dir(loop.Node))), filepath.Dir(filepath.Dir(loop.Node)), filepath.Dir(loop.Node)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(loop.Node, 0o666); err != nil {
		t.Fatal(err)
	}
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
