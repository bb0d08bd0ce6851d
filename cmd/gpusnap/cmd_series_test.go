package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/schematest"
	"github.com/gpusnap/gpusnap/internal/testwait"
)

// writeJSON writes v as a JSON file in dir.
func writeJSON(t *testing.T, dir, name string, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// seriesScenario builds, from the unexpected-masquerade scenario, the NVML
// state after it with a second, idle GPU (idle), and a series for watch:
// the masquerading process pinned flat at 98% on GPU 0, and GPU 1 at 100%
// with no process at all.
func seriesScenario(t *testing.T) (after, series string) {
	t.Helper()
	var state map[string]any
	data, err := os.ReadFile(filepath.Join(scenarioDir("unexpected-masquerade"), "after", "nvml.json"))
	if err != nil || json.Unmarshal(data, &state) != nil {
		t.Fatalf("scenario: %v", err)
	}
	gpu0 := state["devices"].([]any)[0].(map[string]any)
	idle := map[string]any{"index": 1, "uuid": "GPU-busy-alone", "minor_number": 1,
		"memory": map[string]any{"total": 85520809984, "used": 0, "free": 85520809984}}
	state["devices"] = []any{gpu0, idle}
	dir := t.TempDir()
	after = writeJSON(t, dir, "after.json", state)
	busy0, busy1 := map[string]any{}, map[string]any{}
	for k, v := range gpu0 {
		busy0[k] = v
	}
	for k, v := range idle {
		busy1[k] = v
	}
	busy0["utilization"] = map[string]any{"gpu": 98, "memory": 87}
	busy0["process_utilization"] = []any{map[string]any{"pid": 6660, "sm_util": 98, "mem_util": 87}}
	busy1["utilization"] = map[string]any{"gpu": 100, "memory": 0}
	state["series"] = []any{map[string]any{"at": 0, "devices": []any{busy0, busy1}}}
	return after, writeJSON(t, dir, "series.json", state)
}

// TestWatchReplaysSeriesAndDiffShapesIt runs gpusnap watch as a process of
// its own (this test binary as gpusnap, not a build of its own: a link is
// seconds on a loaded host) on an NVML fixture's series, then diff --tenant:
// the masquerading process's finding carries its flat compute pattern, and
// the GPU busy with no process is gpu_busy_without_process.
func TestWatchReplaysSeriesAndDiffShapesIt(t *testing.T) {
	// The daemon inherits the test's environment: it is gpusnap, and a -race
	// binary does not sleep at exit.
	t.Setenv(gpusnapProcessEnv, "1")
	t.Setenv("GORACE", "atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	scen := scenarioDir("unexpected-masquerade")
	after, series := seriesScenario(t)
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	before := []string{"--db", db, "--proc-root", filepath.Join(scen, "before", "proc"), "--nvml-fixture", filepath.Join(scen, "before", "nvml.json")}
	if code, _, errs := gpusnap(t, append([]string{"baseline", "--tenant", "job-s"}, before...)...); code != 0 {
		t.Fatalf("baseline: %s", errs)
	}
	afterProc := filepath.Join(scen, "after", "proc")
	// 20 ms a sample: the 40 the pattern needs are the workload, 0.8 s of it.
	w := livetest.StartDaemon(t, os.Args[0], "watch", "--db", db, "--proc-root", afterProc, "--nvml-fixture", series,
		"--mode", "fallback", "--util-interval", "20ms")
	// 40 samples of the busy GPU in the log (a flush request writes them out).
	err := testwait.For(time.Minute, "40 samples of the busy GPU in the log", func() bool {
		_ = eventlog.RequestFlush(eventlog.JournalDir(db)) // refused until the watch made the log: asked again
		return utilSamples(t, db, "GPU-busy-alone") >= 40 || w.Exited()
	})
	if n := utilSamples(t, db, "GPU-busy-alone"); err != nil || n < 40 {
		t.Fatalf("watch recorded %d samples of the busy GPU (%v, exited %v)", n, err, w.Exited())
	}
	code, out, errs := gpusnap(t, "diff", "--tenant", "job-s", "--json", "--db", db, "--proc-root", afterProc, "--nvml-fixture", after)
	if code != exitFindings {
		t.Fatalf("diff: exit %d: %s", code, errs)
	}
	schematest.Validate(t, "diff", []byte(out))
	if code, events, errs := gpusnap(t, "events", "--json", "--db", db); code != 0 {
		t.Errorf("events --json: exit %d: %s", code, errs)
	} else {
		schematest.Validate(t, "events", []byte(events))
	}
	var r diff.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	var busy, shaped bool
	for _, f := range r.Findings {
		ev := strings.Join(f.Evidence, "\n")
		switch {
		case f.Kind == diff.KindGPUBusyWithoutProcess:
			busy = f.GPUUUID == "GPU-busy-alone" && f.Severity == diff.High && strings.Contains(ev, "no live process at TO holds or maps /dev/nvidia1")
		case f.Kind == diff.KindUnexpectedGPUProcess && f.Process.PID == 6660:
			shaped = strings.Contains(ev, "compute pattern on GPU-3f2a6b1c-0d4e-4f5a-8b9c-1d2e3f4a5b6c: flat, σ 0.0 over") &&
				strings.Contains(strings.Join(f.Triage.Why, "\n"), ": flat")
		}
	}
	if !busy || !shaped {
		t.Errorf("busy GPU raised %v, pattern on the process %v: %s", busy, shaped, out)
	}
	if r.Utilization == nil || len(r.Utilization.Series) != 2 {
		t.Fatalf("utilization: %+v", r.Utilization)
	}

	// events --util: the table, one line a sample; --json, arrays.
	code, out, errs = gpusnap(t, "events", "--util", "--gpu", "GPU-busy-alone", "--db", db)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) < 41 || !strings.HasPrefix(lines[0], "TIME") || !strings.Contains(lines[1], "GPU-busy-alone  100  0     0         0") {
		t.Errorf("events --util: exit %d, %d lines: %q %s", code, len(lines), lines[:min(3, len(lines))], errs)
	}
	code, out, _ = gpusnap(t, "events", "--util", "--json", "--db", db)
	var got []eventlog.UtilSeries
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got) != 2 {
		t.Fatalf("events --util --json: exit %d: %.300s", code, out)
	}
	for _, s := range got {
		p := s.Samples[len(s.Samples)-1].Processes
		if s.GPU == "GPU-3f2a6b1c-0d4e-4f5a-8b9c-1d2e3f4a5b6c" && (len(p) != 1 || p[0].PID != 6660 || p[0].SM != 98 || p[0].StartTime == 0) {
			t.Errorf("GPU 0's last sample: %+v", p)
		}
	}
	if code, _, errs := gpusnap(t, "events", "--gpu", "GPU-busy-alone", "--db", db); code != exitError || !strings.Contains(errs, "--gpu needs --util") {
		t.Errorf("--gpu alone: exit %d: %s", code, errs)
	}
}

// utilSamples counts the samples of gpu in the log of db.
func utilSamples(t *testing.T, db, gpu string) int {
	t.Helper()
	res, err := eventlog.ReadEvents(eventlog.JournalDir(db), time.Time{}, time.Time{})
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range res.Events {
		if e.Util != nil && e.Util.GPU == gpu {
			n += e.Util.Len()
		}
	}
	return n
}
