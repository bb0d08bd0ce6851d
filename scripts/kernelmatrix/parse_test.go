package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A guest's log as go test -v and the init write it: each column comes from
// its test's matrix line, and a skipped or failed test fails the kernel.
func TestParseLog(t *testing.T) {
	log := strings.Join([]string{
		"[    1.0] Run /init as init process",
		"\x1bc\x1b[?7l\x1b[2Jgpusnap-matrix: kernel 6.1.0-57-cloud-amd64",
		"=== RUN   TestWalkVariants",
		"    iter_test.go:171: gpusnap_tasks + gpusnap_vmas: refused: load tasks iterator: ...",
		"    iter_test.go:230: matrix: capture iterators: load gpusnap_tasks_proc_exe (refused: gpusnap_tasks: program gpusnap_tasks: fixing up kfuncs: kfunc \"bpf_rcu_read_lock\": not supported), gpusnap_vma, gpusnap_files",
		"--- PASS: TestWalkVariants (0.35s)",
		"    watch_test.go:111: matrix: lsm caught 1000/1000 short-lived device users (41s; lost 0)",
		"    watch_test.go:24: matrix: fentry refused: no BPF hook loads (fentry: a|b)",
		"    watch_test.go:111: matrix: kprobe caught 1000/1000 short-lived device users (45s; lost 0)",
		"    cost_test.go:191: matrix: kprobe open/close: empty programs 0.990x, watch 0.971x (CPU ns per open+close: none 9000)",
		"    cost_test.go:238: matrix: kprobe watch above empty programs: 1.2 points",
		"    --- FAIL: TestEachHookShortUsers/fentry (0.10s)",
		"    --- SKIP: TestOpenWalkPins (0.00s)",
		"gpusnap-matrix: exit 1",
	}, "\r\n")
	r := parseLog(log)
	if r.kernel != "6.1.0-57-cloud-amd64" || r.exit != "1" || r.passed() {
		t.Errorf("kernel %q exit %q passed %v", r.kernel, r.exit, r.passed())
	}
	if r.iterators != "load gpusnap_tasks_proc_exe (refused: gpusnap_tasks: no kfunc bpf_rcu_read_lock), gpusnap_vma, gpusnap_files" {
		t.Errorf("iterators %q", r.iterators)
	}
	if r.hook("lsm") != "loads; caught 1000/1000 users" || r.hook("fentry") != "refused: no BPF hook loads (fentry: a|b)" || r.hook("tracepoint") != "" {
		t.Errorf("hooks %q", r.hooks)
	}
	if r.hook("kprobe") != "loads; caught 1000/1000 users; open/close 0.971x (empty programs 0.990x), 1.2 points above them round by round" {
		t.Errorf("kprobe cell %q", r.hook("kprobe"))
	}
	// A cost guest's figure stands alone where the tests' guest said nothing of the hook.
	if c := parseLog("    cost_test.go:191: matrix: lsm open/close: empty programs 0.990x, watch 0.980x (...)\n").hook("lsm"); c != "open/close 0.980x (empty programs 0.990x)" {
		t.Errorf("a cost alone: %q", c)
	}
	if v := r.verdict(); v != "failed: TestEachHookShortUsers/fentry (fail), TestOpenWalkPins (skip)" {
		t.Errorf("verdict %q", v)
	}
	if cell(r.hooks["fentry"]) != `refused: no BPF hook loads (fentry: a\|b)` || cell("") != "not run" {
		t.Errorf("cells %q %q", cell(r.hooks["fentry"]), cell(""))
	}
	if r := parseLog("gpusnap-matrix: kernel 6.12\n"); r.verdict() != "did not finish" || r.passed() {
		t.Errorf("a guest that never said its exit: %q", r.verdict())
	}
}

// A kernel's cost guest adds its cost to the row of its tests' guest, and
// either guest's failure fails the row.
func TestPrintTableMergesAKernelsGuests(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, lines ...string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := write("tests.log", "gpusnap-matrix: kernel 6.12",
		"    watch_test.go:111: matrix: kprobe caught 1000/1000 short-lived device users (45s; lost 0)", "gpusnap-matrix: exit 0")
	cost := write("cost.log", "gpusnap-matrix: kernel 6.12",
		"    cost_test.go:191: matrix: kprobe open/close: empty programs 0.990x, watch 0.971x (CPU ns per open+close: none 9000)",
		"    --- FAIL: TestHookCost/lsm (1.00s)", "gpusnap-matrix: exit 1")
	var out strings.Builder
	ok, err := printTable(&out, []string{tests, cost})
	if err != nil || ok {
		t.Fatalf("ok %v, err %v: a failed cost guest passed", ok, err)
	}
	rows := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := "| 6.12 | not run | not run | not run | loads; caught 1000/1000 users; open/close 0.971x (empty programs 0.990x) | not run | not run | failed: TestHookCost/lsm (fail) |"
	if len(rows) != 3 || rows[2] != want {
		t.Errorf("table:\n%s\nwant the row\n%s", out.String(), want)
	}
}

// The DRM guest's log (a generic kernel with vgem loaded, running
// TestDRMGuest of capture/accel) gives its kernel's row a drm cell; a
// module the kernel refused, or the test failing, fails the row.
func TestDRMGuestLog(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "drm.log")
	lines := []string{
		"\x1bc\x1b[?7l\x1b[2J[    0.032000] ..MP-BIOS bug: 8254 timer not connected to IO-APIC",
		"gpusnap-matrix: kernel 6.12.117+deb12-amd64",
		"=== RUN   TestDRMGuest",
		"    drm_guest_test.go:97: matrix: drm: vgem 226:0 and 226:128; ghost and holder named (3 findings), fdinfo with no drm- keys",
		"--- PASS: TestDRMGuest (0.31s)",
		"PASS",
		"gpusnap-matrix: exit 0",
	}
	if err := os.WriteFile(log, []byte(strings.Join(lines, "\r\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	ok, err := printTable(&out, []string{log})
	want := "| 6.12.117+deb12-amd64 | not run | not run | not run | not run | not run | vgem 226:0 and 226:128; ghost and holder named (3 findings), fdinfo with no drm- keys | all pass |"
	if rows := strings.Split(strings.TrimSpace(out.String()), "\n"); !ok || err != nil || len(rows) != 3 || rows[2] != want {
		t.Errorf("ok %v err %v table:\n%s\nwant the row\n%s", ok, err, out.String(), want)
	}
	r := parseLog(strings.Join(append(lines[:2:2], "gpusnap-matrix: module vgem.ko.xz: exec format error",
		"    drm_guest_test.go:115: no vgem device in the DRM guest: <nil>", "--- FAIL: TestDRMGuest (0.01s)", "gpusnap-matrix: exit 1"), "\n"))
	if r.passed() || r.verdict() != "failed: TestDRMGuest (fail)" || r.drm != "" {
		t.Errorf("a guest without vgem: %q passed %v drm %q", r.verdict(), r.passed(), r.drm)
	}
}
