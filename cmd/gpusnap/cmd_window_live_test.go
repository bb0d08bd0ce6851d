package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
)

// TestLiveHiddenDeviceUseParkedFd: with gpusnap watch recording, a tenant
// opens the GPU node read-write, parks the open file in its own unix
// socket's queue (SCM_RIGHTS to itself) and closes its fd: /proc shows it
// neither holding nor mapping the device, the log holds the open, and the
// process is alive. diff --tenant reports hidden_device_use (high) and exits
// 1; check, run next, fails on it too.
func TestLiveHiddenDeviceUseParkedFd(t *testing.T) {
	livetest.Require(t, "gcc")
	loop := livetest.NewLoop(t)
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	g := []string{"--db", db, "--no-nvml"}
	if code, _, errs := gpusnap(t, append([]string{"baseline", "--tenant", "parker"}, g...)...); code != 0 {
		t.Fatalf("baseline: %s", errs)
	}
	startWatch(t, g...)
	parker := livetest.StartParker(t, loop.Node)

	hidden := func(what string, code int, out, errs string) {
		t.Helper()
		var r diff.Result
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%s: exit %d, %v: %s", what, code, err, errs)
		}
		found := false
		for _, f := range r.Findings {
			if f.Process != nil && f.Process.PID == parker.PID && f.Kind != diff.KindHiddenDeviceUse {
				t.Errorf("%s: the parker raised %s: %s", what, f.Kind, f.Summary)
			}
			found = found || f.Kind == diff.KindHiddenDeviceUse && f.Severity == diff.High && f.Device == loop.Node &&
				f.Process.PID == parker.PID && f.Process.StartTime == parker.StartTime
		}
		if !found || code != exitFindings {
			t.Errorf("%s: exit %d, hidden_device_use of %d found %v; findings %+v notes %q", what, code, parker.PID, found, r.Findings, r.Notes)
		}
	}
	code, out, errs := gpusnap(t, append([]string{"diff", "--tenant", "parker", "--json"}, g...)...)
	hidden("diff", code, out, errs)
	code, out, errs = gpusnap(t, append([]string{"check", "--json"}, g...)...)
	hidden("check", code, out, errs)

	// The parker maps no device and was read in full, so the capture did not
	// read its code (its libraries, its loader variables): an exe entry
	// naming its binary does not vouch for it.
	exe, err := os.Readlink("/proc/" + strconv.Itoa(parker.PID) + "/exe")
	noErr(t, err)
	allow := filepath.Join(t.TempDir(), "allow.list")
	noErr(t, os.WriteFile(allow, []byte("exe="+exe+"\n"), 0o600))
	code, out, errs = gpusnap(t, append([]string{"diff", "--tenant", "parker", "--json", "--allow", allow}, g...)...)
	hidden("diff with an exe entry for the parker", code, out, errs)
}

// TestLiveFlushRaceTransientCaught: a worker that opens and maps the GPU
// node and exits right before diff --tenant runs is in the event log only
// once the watch has flushed it: the diff waits, bounded, for the log to
// reach TO (asking the watch for a record), and reports the worker as a
// transient_gpu_process every time, with no flush problem. 20 rounds.
func TestLiveFlushRaceTransientCaught(t *testing.T) {
	livetest.Require(t, "gcc")
	loop := livetest.NewLoop(t)
	bin := livetest.BuildBurst(t)
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	g := []string{"--db", db, "--no-nvml"}
	startWatch(t, g...)
	rounds, caught := 20, 0
	for i := range rounds {
		tenant := "race-" + string(rune('a'+i))
		if code, _, errs := gpusnap(t, append([]string{"baseline", "--tenant", tenant}, g...)...); code != 0 {
			t.Fatalf("baseline: %s", errs)
		}
		pid := livetest.Burst(t, bin, loop.Node, 1)[0]
		code, out, errs := gpusnap(t, append([]string{"diff", "--tenant", tenant, "--json"}, g...)...)
		var r diff.Result
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != exitFindings {
			t.Fatalf("round %d: exit %d, %v: %s", i, code, err, errs)
		}
		for _, f := range r.Findings {
			if f.Kind == diff.KindTransientGPUProcess && f.Process.PID == pid && f.Device == loop.Node {
				caught++
			}
			if f.Kind == diff.KindWindowNotCovered && strings.Contains(strings.Join(f.Evidence, "\n"), "unflushed") {
				t.Errorf("round %d: %s: %q", i, f.Summary, f.Evidence)
			}
		}
	}
	t.Logf("%d/%d workers that exited right before the diff were caught", caught, rounds)
	if caught != rounds {
		t.Errorf("%d/%d transients caught", caught, rounds)
	}
}

// TestLiveWindowNotCovered: a baseline taken while gpusnap watch records,
// then the watch stopped before the diff: the rest of the window is a gap,
// window_not_covered, and the diff exits 1 with nothing else to find. With
// --expect-watch, a store no watch ever recorded into fails the same way,
// for diff and check (GPUSNAP_EXPECT_WATCH=1 too).
func TestLiveWindowNotCovered(t *testing.T) {
	livetest.Require(t)
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	g := []string{"--db", db, "--no-nvml"}
	w := startWatch(t, g...)
	if code, _, errs := gpusnap(t, append([]string{"baseline", "--tenant", "gap"}, g...)...); code != 0 {
		t.Fatalf("baseline: %s", errs)
	}
	if code := w.stop(t); code != 0 {
		t.Fatalf("watch stopped with exit %d: %s", code, w.stderr.String())
	}
	notCovered := func(what string, args []string, want string) {
		t.Helper()
		code, out, errs := gpusnap(t, args...)
		var r diff.Result
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%s: exit %d, %v: %s", what, code, err, errs)
		}
		for _, f := range r.Findings {
			if f.Kind == diff.KindWindowNotCovered && f.Severity == diff.Medium && strings.Contains(strings.Join(f.Evidence, "\n"), want) && code == exitFindings {
				return
			}
		}
		t.Errorf("%s: exit %d, no window_not_covered with %q: findings %+v notes %q", what, code, want, r.Findings, r.Notes)
	}
	notCovered("diff after the watch stopped", append([]string{"diff", "--tenant", "gap", "--json"}, g...), "gap: no gpusnap watch recorded from")

	bare := []string{"--db", filepath.Join(t.TempDir(), "gpusnap.db"), "--no-nvml"}
	if code, _, errs := gpusnap(t, append([]string{"baseline", "--tenant", "none"}, bare...)...); code != 0 {
		t.Fatalf("baseline: %s", errs)
	}
	notCovered("diff --expect-watch of a store without a log", append([]string{"diff", "--tenant", "none", "--json", "--expect-watch"}, bare...), "no_log: there is no event log")
	t.Setenv("GPUSNAP_EXPECT_WATCH", "1")
	notCovered("check with GPUSNAP_EXPECT_WATCH=1", append([]string{"check", "--json"}, bare...), "no_log: there is no event log")
}
