package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/internal/livetest"
)

// quickSteps are the steps TestAllQuick runs: one of each kind of output
// perfdoc reads (hyperfine's JSON, go test's benchmark lines, the hook-cost
// log lines), within about three minutes on 2 CPUs. The whole --quick run
// takes 15-20 minutes there: each step builds its own binaries.
const quickSteps = "check compare hooks"

// TestAllQuick runs bench/all.sh --quick on this host, the steps of
// quickSteps only, and checks the page it writes: every table present with
// every row, each row of those steps a figure, CPU and wall cells and the
// command that reproduces it, the others "not run", and the run's header.
// The quick run's figures are not held to their targets: a few rounds on a
// shared host say little, and the full run is what the page quotes.
func TestAllQuick(t *testing.T) {
	livetest.Require(t, "hyperfine", "fuser", "lsof", "gcc", "losetup", "git", "python3")
	// watch.sh opens a node named nvidia0 thousands of times a second.
	livetest.OwnNoisyHost(t)
	out := filepath.Join(t.TempDir(), "performance.md")
	cmd := exec.Command("bash", "../all.sh", "--quick", "--only", quickSteps, "--out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bench/all.sh --quick: %v\n%s", err, b)
	}
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]bool{}
	for _, s := range strings.Fields(quickSteps) {
		ran[s] = true
	}
	checkPage(t, string(page), tables([]string{"100"}, true), ran)
	// Every hook "refused here" would also be a page of that shape: CI's
	// kernels attach at least the tracepoint hook.
	if !regexp.MustCompile(`(?m)^\| open/close with the \w+ watch / bare \| \*\*`).Match(page) {
		t.Errorf("no hook's open/close measured:\n%s", page)
	}
}

// checkPage holds a page to the tables it must hold, in order, and the rows
// of the steps that ran to a figure each.
func checkPage(t *testing.T, page string, want []table, ran map[string]bool) {
	t.Helper()
	for _, h := range []string{"# Performance\n", "| run | host |", "load average", "## The run's steps"} {
		if !strings.Contains(page, h) {
			t.Errorf("the page has no %q", h)
		}
	}
	lines := strings.Split(page, "\n")
	at := 0
	for _, tab := range want {
		i := indexFrom(lines, at, "## "+tab.title)
		if i < 0 {
			t.Errorf("no table %q (in order)", tab.title)
			continue
		}
		at = i
		for _, r := range tab.rows {
			j := indexFrom(lines, at, "| "+r.what)
			if j < 0 {
				t.Errorf("%s: no row %q", tab.title, r.what)
				continue
			}
			at = j
			checkRow(t, lines[j], ran[r.step])
		}
	}
}

// checkRow holds one row to its seven cells, none empty, and a figure
// measured where its step ran, "not run" where it did not.
func checkRow(t *testing.T, line string, ran bool) {
	t.Helper()
	cells := strings.Split(strings.Trim(line, "|"), " | ")
	if len(cells) != 7 {
		t.Errorf("%d cells, want 7: %s", len(cells), line)
		return
	}
	for i, c := range cells {
		if strings.TrimSpace(c) == "" {
			t.Errorf("cell %d is empty: %s", i+1, line)
		}
	}
	if !ran {
		if cells[1] != "not run in this run" {
			t.Errorf("a row of a step not run: %s", line)
		}
		return
	}
	if fig := cells[1]; !strings.HasPrefix(fig, "**") && fig != "refused here" {
		t.Errorf("no figure: %s", line)
	}
	if !strings.HasPrefix(cells[6], "`") {
		t.Errorf("no command to reproduce it: %s", line)
	}
}

func indexFrom(lines []string, from int, prefix string) int {
	for i := from; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], prefix) {
			return i
		}
	}
	return -1
}

// TestGapIsNotAFigure renders a full run of a few steps, one of which
// failed and one of which printed NaN: the rows of those and of every missing
// step, and the kernel matrix, say they were not measured, and render counts
// them.
func TestGapIsNotAFigure(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("host.txt", "date=now\nmode=full\nsizes=100\n")
	write("steps.tsv", "compare\tgo test -bench Compare ./diff/\t1\t3\nnvml\tgo test -bench . ./nvmlread/\t0\t2\n"+
		"watch\tbench/watch.sh\t0\t9\nhooks\tgo test -run TestHookCost -v ./bpf/\t0\t5\n"+
		"overfloor\tgo test -bench CaptureOverFloor ./bench/\t0\t4\n")
	// 0/0 in a benchmark's metric: go test prints NaN.
	write("overfloor.out", "BenchmarkCaptureOverFloor/proc-2   \t 1\t  9000 ns/op\t  NaN x-floor\t  NaN x-floor-cpu\t 0 capture-cpu-ms\t 0 floor-cpu-ms\n")
	write("watch.out", "metric loop-ratio 0.912\n")
	write("hooks.out", "    cost_test.go:205: matrix: tracepoint open/close: empty programs 0.950x, watch 0.921x (CPU ns per open+close: none 1234, empty programs 1300, watch 1340)\n"+
		"    cost_test.go:205: matrix: kprobe open/close: empty programs 0.990x, watch 0.983x (CPU ns per open+close: none 1234, empty programs 1250, watch 1260)\n")
	write("compare.out", "BenchmarkCompare-2   \t 100\t  7100000 ns/op\nFAIL\n")
	write("nvml.out", "BenchmarkReadNVML8x100-2   \t 1000\t  110000 ns/op\n")
	r, err := readResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	var page strings.Builder
	gaps := render(&page, r)
	// The rows these outputs measure; a hook the output does not name reads
	// "refused here", which is no gap.
	measured := map[string]bool{
		"NVML read, 8 GPUs and 100 processes (go-nvml's mock)":                      true,
		"open/close loop of a regular file with watch / without (wall of the loop)": true,
		"open/close with the tracepoint watch / bare":                               true,
		"open/close with empty tracepoint programs / bare (the kernel's floor)":     true,
		"open/close with the lsm watch / bare":                                      true,
		"open/close with empty lsm programs / bare (the kernel's floor)":            true,
		"open/close with the fentry watch / bare":                                   true,
		"open/close with empty fentry programs / bare (the kernel's floor)":         true,
		"open/close with the kprobe watch / bare":                                   true,
		"open/close with empty kprobe programs / bare (the kernel's floor)":         true,
		"open/close: the kprobe watch's speed below the empty kprobe programs'":     true,
	}
	want := 1 // the kernel matrix
	for _, tab := range tables([]string{"100"}, false) {
		for _, row := range tab.rows {
			if !measured[row.what] {
				want++
			}
		}
	}
	if gaps != want {
		t.Errorf("%d rows not measured, want %d (all but the NVML read)\n%s", gaps, want, page.String())
	}
	for _, line := range strings.Split(page.String(), "\n") {
		if strings.HasPrefix(line, "| `diff.Compare`") && !strings.Contains(line, "not measured: the step exited 1") {
			t.Errorf("a failed step's row: %s", line)
		}
		if strings.HasPrefix(line, "| /proc capture / floor, alternated") && !strings.Contains(line, "not measured: the figure is NaN") {
			t.Errorf("a NaN figure: %s", line)
		}
		if strings.HasPrefix(line, "| NVML read") && !strings.Contains(line, "**0.11 ms**") {
			t.Errorf("the measured row: %s", line)
		}
		if strings.HasPrefix(line, "| open/close loop") && !strings.Contains(line, "**0.912x**") {
			t.Errorf("the script's metric: %s", line)
		}
		if strings.HasPrefix(line, "| open/close with the tracepoint watch") && !strings.Contains(line, "**0.921x** | 1234 ns bare") {
			t.Errorf("the hook's row: %s", line)
		}
		if strings.HasPrefix(line, "| open/close: the kprobe watch's speed below") && !strings.Contains(line, "**0.7 points** | 1234 ns bare | thread CPU clock | <= 1 points | yes") {
			t.Errorf("the kprobe watch against its floor: %s", line)
		}
		if strings.HasPrefix(line, "| open/close with the lsm watch") && !strings.Contains(line, "refused here") {
			t.Errorf("a hook the kernel refused: %s", line)
		}
	}
}
