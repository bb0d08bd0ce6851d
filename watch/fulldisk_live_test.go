package watch

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testwait"
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
	w.waitLogged(t, "the start record on disk", func(events []eventlog.Event) bool {
		return slices.ContainsFunc(events, func(e eventlog.Event) bool { return e.Kind == eventlog.KindWatchStart })
	})
	filler := livetest.FillDisk(t, mnt)
	pids := livetest.Burst(t, bin, loop.Node, 40)
	testwait.Until(t, 20*time.Second, "the watch to meet the full disk", func() bool {
		return strings.Contains(w.log.String(), "no space left")
	})
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	w.waitLogged(t, "every worker's open in the log", logged(pids, eventlog.KindOpen))
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
