package main

import (
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
	if r.hooks["lsm"] != "loads; caught 1000/1000 users" || r.hooks["fentry"] != "refused: no BPF hook loads (fentry: a|b)" || r.hooks["tracepoint"] != "" {
		t.Errorf("hooks %q", r.hooks)
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
