package watch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/livetest"
)

// TestLiveFullDiskKeepsTransients runs a watch whose store lives on a real,
// really full tmpfs: the workers that open the device meanwhile are written
// short, then refused (ENOSPC). Once the disk has room again every worker's
// open is in the log, whole, once, and no line of it is damaged or breaks
// the chain.
func TestLiveFullDiskKeepsTransients(t *testing.T) {
	loop := livetest.NewLoop(t)
	bin := livetest.BuildBurst(t)
	mnt := livetest.SmallTmpfs(t, 1<<20)
	db := filepath.Join(mnt, "gpusnap.db")
	w := startWatch(t, db, Options{Mode: ModeBPF})
	time.Sleep(300 * time.Millisecond) // the start record's flush
	filler := livetest.FillDisk(t, mnt)
	pids := livetest.Burst(t, bin, loop.Node, 40)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(w.log.String(), "no space left") && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(w.log.String(), "no space left") {
		t.Fatalf("the watch never met the full disk: %s", w.log.String())
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	w.stop(t)
	res := readAll(t, db)
	if res.Broken != 0 {
		t.Errorf("%d records break the chain: %v", res.Broken, res.Faults)
	}
	opens := map[int]int{}
	for _, e := range res.Events {
		if e.Kind == eventlog.KindOpen && e.Device != nil && e.Device.Path == loop.Node {
			opens[e.Process.PID]++
		}
	}
	for _, pid := range pids {
		if opens[pid] != 1 {
			t.Errorf("worker %d: %d open records, want 1", pid, opens[pid])
		}
	}
}
