package bench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

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
	ctx := context.Background()
	opts := snapshot.Options{ProcRoot: "/proc", Label: snapshot.LabelSnapshot}
	put := func(snap *snapshot.Snapshot) store.Usage {
		st, err := store.Open(path, store.Options{LockTimeout: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		if err := st.Put(snap); err != nil {
			b.Fatal(err)
		}
		u, err := st.Usage()
		if err != nil {
			b.Fatal(err)
		}
		return u
	}
	empty := put(&snapshot.Snapshot{ID: "0-empty", Label: "empty"}) // the store's own pages, before any real snapshot

	// captureAndStore captures the host and stores it, timing each half, and
	// reports the store's usage after it.
	captureAndStore := func() (snap *snapshot.Snapshot, capture, storing time.Duration, u store.Usage) {
		start := time.Now()
		snap, err := snapshot.Capture(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		u = put(snap)
		return snap, mid.Sub(start), time.Since(mid), u
	}

	// Real captures, alternated with storing them.
	const real = 10
	var captures []*snapshot.Snapshot
	var capT, storeT time.Duration
	var first, prev store.Usage
	var maxGrow, realGrow, realMax int64
	realN := 0
	for i := range real {
		snap, c, st, u := captureAndStore()
		capT, storeT = capT+c, storeT+st
		captures = append(captures, snap)
		if i == 0 {
			first = u
		} else {
			g := u.UsedBytes - prev.UsedBytes
			maxGrow, realMax, realGrow, realN = max(maxGrow, g), max(realMax, g), realGrow+g, realN+1
		}
		prev = u
	}
	firstBytes := first.UsedBytes - empty.UsedBytes

	// The unchanged host, 980 times more: the real captures again under new ids.
	st, err := store.Open(path, store.Options{LockTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	for i := real; i < 1000-real; i++ {
		snap := *captures[i%real]
		snap.Host.CaptureStart = t0.Add(time.Duration(i) * time.Second)
		snap.ID = snapshot.NewID(snap.Host.CaptureStart)
		if err := st.Put(&snap); err != nil {
			b.Fatal(err)
		}
		u, err := st.Usage()
		if err != nil {
			b.Fatal(err)
		}
		maxGrow = max(maxGrow, u.UsedBytes-prev.UsedBytes)
		prev = u
	}
	if _, err := st.Remove("0-empty", true); err != nil {
		b.Fatal(err)
	}
	_ = st.Close()

	// Steady state: 10 more real captures, each stored into the full store,
	// which no longer grows its file at every snapshot as a new one does.
	var capSteady, storeSteady time.Duration
	for i := range real {
		_, c, st, u := captureAndStore()
		capSteady, storeSteady = capSteady+c, storeSteady+st
		g := u.UsedBytes - prev.UsedBytes
		maxGrow = max(maxGrow, g)
		if i > 0 { // the first follows a replay, not a real capture
			realMax, realGrow, realN = max(realMax, g), realGrow+g, realN+1
		}
		prev = u
	}
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}

	// Readers: list everything, then load every snapshot.
	st, err = store.Open(path, store.Options{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	var lists []time.Duration
	var metas []store.Meta
	for range 20 {
		start := time.Now()
		if metas, err = st.List(store.Filter{}); err != nil {
			b.Fatal(err)
		}
		lists = append(lists, time.Since(start))
	}
	var getMax, getSum, jsonMax, jsonSum time.Duration
	for _, m := range metas {
		start := time.Now()
		if _, err := st.Get(m.ID); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		if _, err := st.GetJSON(m.ID); err != nil {
			b.Fatal(err)
		}
		d, j := mid.Sub(start), time.Since(mid)
		getMax, getSum, jsonMax, jsonSum = max(getMax, d), getSum+d, max(jsonMax, j), jsonSum+j
	}
	slices.Sort(lists)

	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(float64(captures[0].Scan.ProcessesRead), "procs")
	b.ReportMetric(float64(firstBytes)/1024, "first-KB")
	b.ReportMetric(100*float64(maxGrow)/float64(firstBytes), "max-grow-%")
	b.ReportMetric(float64(prev.UsedBytes-first.UsedBytes)/float64(1000-1)/1024, "mean-grow-KB")
	b.ReportMetric(float64(fi.Size())/1e6, "file-MB")
	realMean := float64(realGrow) / float64(realN)
	b.ReportMetric(realMean/1024, "real-mean-grow-KB")
	b.ReportMetric(100*float64(realMax)/float64(firstBytes), "real-max-grow-%")
	b.ReportMetric((float64(firstBytes)+999*realMean)/1e6, "real-1000-MB")
	b.ReportMetric(ms(lists[len(lists)/2]), "list-ms")
	b.ReportMetric(ms(getMax), "get-max-ms")
	b.ReportMetric(ms(getSum)/float64(len(metas)), "get-mean-ms")
	b.ReportMetric(ms(jsonMax), "getjson-max-ms")
	b.ReportMetric(ms(jsonSum)/float64(len(metas)), "getjson-mean-ms")
	b.ReportMetric(ms(capT)/real, "capture-ms")
	b.ReportMetric(ms(storeT)/real, "store-ms")
	b.ReportMetric(float64(storeT)/float64(capT), "store-over-capture")
	b.ReportMetric(float64(storeSteady)/float64(capSteady), "steady-store-over-capture")
}
