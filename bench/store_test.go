package bench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/render"
	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
)

// BenchmarkStore measures the store's size and speed targets (docs/store.md) on this host, in
// one run (bench/store.sh starts 500 extra sleeps first):
//
//   - first-KB: the store's used pages after the first snapshot
//   - max-grow-%: the most one further snapshot of the unchanged host adds, in
//     percent of first-KB (target <= 5)
//   - real-mean-grow-KB, real-max-grow-%: what each of the 20 real captures
//     (10 into the new store, 10 into the full one) added over the one
//     before it: the growth of a host as it changes between captures
//   - file-MB: the file after 1,000 snapshots (target < 50), 980 of them the
//     first 10 real captures stored again under new ids, so they add less
//     than real ones would; real-1000-MB projects 1,000 real captures from
//     first-KB and real-mean-grow-KB
//   - list-ms, get-max-ms, getjson-max-ms: List of all 1,000, and the slowest
//     Get (show) and GetJSON (show --json) of any one (targets 50 and 20 ms;
//     bench/store.sh times the commands too)
//   - store-over-capture: the time to open the store, put a snapshot and close
//     it, over the capture's time, alternated in one run (target <= 0.10), for
//     the first 10 snapshots (the file grows, with an fsync, as they come) and
//     for 10 into the full store (steady-store-over-capture)
//
// Run it once: go test -run x -bench Store -benchtime 1x ./bench/
// With GPUSNAP_BENCH_DB set, the 1,000-snapshot store is left at that path.
func BenchmarkStore(b *testing.B) {
	for b.Loop() {
		benchStore(b)
	}
}

func benchStore(b *testing.B) {
	path := os.Getenv("GPUSNAP_BENCH_DB")
	if path == "" {
		path = filepath.Join(b.TempDir(), "gpusnap.db")
	}
	_ = os.Remove(path)
	sb := &storeBench{b: b, path: path, opts: capture.Options{ProcRoot: "/proc", Label: snapshot.LabelSnapshot}}
	sb.empty = sb.put(&snapshot.Snapshot{ID: "0-empty", Label: "empty"}) // the store's own pages, before any real snapshot
	sb.fill()
	sb.replay()
	sb.steady()
	sb.read()
	sb.report()
}

// realCaptures is how many real captures go into the new store, and again
// into the full one.
const realCaptures = 10

// storeBench is one run of BenchmarkStore: its phases, in order, fill the
// new store with real captures, replay them to 1,000 snapshots, store real
// captures into the full store, and read it all back.
type storeBench struct {
	b    *testing.B
	path string
	opts capture.Options

	captures                   []*snapshot.Snapshot // the real captures of the fill
	empty, first, prev         store.Usage          // before any real snapshot, after the first, after the last
	maxGrow, realGrow, realMax int64                // growth per snapshot: any, summed and most of real ones
	realN                      int                  // real captures in realGrow
	capT, storeT               time.Duration        // the fill's capture and store times
	capSteady, storeSteady     time.Duration        // the same into the full store
	fileSize                   int64                // the file after 1,000 snapshots

	lists                            []time.Duration // List of everything, sorted
	gets                             int             // snapshots loaded
	getMax, getSum, jsonMax, jsonSum time.Duration
}

// put opens the store, puts snap and closes it, as one gpusnap command
// does, and reports the store's usage after it.
func (sb *storeBench) put(snap *snapshot.Snapshot) store.Usage {
	st, err := store.Open(sb.path, store.Options{LockTimeout: time.Second})
	if err != nil {
		sb.b.Fatal(err)
	}
	defer st.Close()
	if err := st.Put(snap); err != nil {
		sb.b.Fatal(err)
	}
	u, err := st.Usage()
	if err != nil {
		sb.b.Fatal(err)
	}
	return u
}

// captureAndStore captures the host and stores it, timing each half, and
// reports the store's usage after it.
func (sb *storeBench) captureAndStore() (snap *snapshot.Snapshot, capturing, storing time.Duration, u store.Usage) {
	start := time.Now()
	snap, err := capture.Capture(context.Background(), sb.opts)
	if err != nil {
		sb.b.Fatal(err)
	}
	mid := time.Now()
	u = sb.put(snap)
	return snap, mid.Sub(start), time.Since(mid), u
}

// fill stores real captures, alternated with taking them, into the new store.
func (sb *storeBench) fill() {
	for i := range realCaptures {
		snap, c, st, u := sb.captureAndStore()
		sb.capT, sb.storeT = sb.capT+c, sb.storeT+st
		sb.captures = append(sb.captures, snap)
		if i == 0 {
			sb.first = u
		} else {
			sb.realGrowth(u.UsedBytes - sb.prev.UsedBytes)
		}
		sb.prev = u
	}
}

// realGrowth counts what one real capture added over the one before it.
func (sb *storeBench) realGrowth(g int64) {
	sb.maxGrow, sb.realMax, sb.realGrow, sb.realN = max(sb.maxGrow, g), max(sb.realMax, g), sb.realGrow+g, sb.realN+1
}

// replay stores the unchanged host 980 times more: the real captures again
// under new ids, into one open store.
func (sb *storeBench) replay() {
	st, err := store.Open(sb.path, store.Options{LockTimeout: time.Second})
	if err != nil {
		sb.b.Fatal(err)
	}
	t0 := time.Now()
	for i := realCaptures; i < 1000-realCaptures; i++ {
		snap := *sb.captures[i%realCaptures]
		snap.Host.CaptureStart = t0.Add(time.Duration(i) * time.Second)
		snap.ID = snapshot.NewID(snap.Host.CaptureStart)
		if err := st.Put(&snap); err != nil {
			sb.b.Fatal(err)
		}
		u, err := st.Usage()
		if err != nil {
			sb.b.Fatal(err)
		}
		sb.maxGrow = max(sb.maxGrow, u.UsedBytes-sb.prev.UsedBytes)
		sb.prev = u
	}
	if _, err := st.Remove("0-empty", true); err != nil {
		sb.b.Fatal(err)
	}
	_ = st.Close()
}

// steady stores more real captures, each into the full store, which no
// longer grows its file at every snapshot as a new one does.
func (sb *storeBench) steady() {
	for i := range realCaptures {
		_, c, st, u := sb.captureAndStore()
		sb.capSteady, sb.storeSteady = sb.capSteady+c, sb.storeSteady+st
		g := u.UsedBytes - sb.prev.UsedBytes
		if i > 0 { // the first follows a replay, not a real capture
			sb.realGrowth(g)
		} else {
			sb.maxGrow = max(sb.maxGrow, g)
		}
		sb.prev = u
	}
	fi, err := os.Stat(sb.path)
	if err != nil {
		sb.b.Fatal(err)
	}
	sb.fileSize = fi.Size()
}

// read times the readers: list everything, then load every snapshot.
func (sb *storeBench) read() {
	st, err := store.Open(sb.path, store.Options{ReadOnly: true})
	if err != nil {
		sb.b.Fatal(err)
	}
	defer st.Close()
	var metas []store.Meta
	for range 20 {
		start := time.Now()
		if metas, err = st.List(store.Filter{}); err != nil {
			sb.b.Fatal(err)
		}
		sb.lists = append(sb.lists, time.Since(start))
	}
	for _, m := range metas {
		start := time.Now()
		if _, err := st.Get(m.ID); err != nil {
			sb.b.Fatal(err)
		}
		mid := time.Now()
		if _, _, err := st.GetJSON(m.ID, render.AppendProcessJSON); err != nil {
			sb.b.Fatal(err)
		}
		d, j := mid.Sub(start), time.Since(mid)
		sb.getMax, sb.getSum, sb.jsonMax, sb.jsonSum = max(sb.getMax, d), sb.getSum+d, max(sb.jsonMax, j), sb.jsonSum+j
	}
	sb.gets = len(metas)
	slices.Sort(sb.lists)
}

// report reports the metrics the doc comment of BenchmarkStore names.
func (sb *storeBench) report() {
	b := sb.b
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	firstBytes := sb.first.UsedBytes - sb.empty.UsedBytes
	b.ReportMetric(float64(sb.captures[0].Scan.ProcessesRead), "procs")
	b.ReportMetric(float64(firstBytes)/1024, "first-KB")
	b.ReportMetric(100*float64(sb.maxGrow)/float64(firstBytes), "max-grow-%")
	b.ReportMetric(float64(sb.prev.UsedBytes-sb.first.UsedBytes)/float64(1000-1)/1024, "mean-grow-KB")
	b.ReportMetric(float64(sb.fileSize)/1e6, "file-MB")
	realMean := float64(sb.realGrow) / float64(sb.realN)
	b.ReportMetric(realMean/1024, "real-mean-grow-KB")
	b.ReportMetric(100*float64(sb.realMax)/float64(firstBytes), "real-max-grow-%")
	b.ReportMetric((float64(firstBytes)+999*realMean)/1e6, "real-1000-MB")
	b.ReportMetric(ms(sb.lists[len(sb.lists)/2]), "list-ms")
	b.ReportMetric(ms(sb.getMax), "get-max-ms")
	b.ReportMetric(ms(sb.getSum)/float64(sb.gets), "get-mean-ms")
	b.ReportMetric(ms(sb.jsonMax), "getjson-max-ms")
	b.ReportMetric(ms(sb.jsonSum)/float64(sb.gets), "getjson-mean-ms")
	b.ReportMetric(ms(sb.capT)/realCaptures, "capture-ms")
	b.ReportMetric(ms(sb.storeT)/realCaptures, "store-ms")
	b.ReportMetric(float64(sb.storeT)/float64(sb.capT), "store-over-capture")
	b.ReportMetric(float64(sb.storeSteady)/float64(sb.capSteady), "steady-store-over-capture")
}
