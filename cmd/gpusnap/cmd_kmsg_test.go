package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testenv"
)

// As root on the live /dev/kmsg: a line in the NVIDIA driver's words written
// from user space (as any root process, or a container allowed to, can) is a
// forged_kernel_message and never an xid_error. The only write to /dev/kmsg
// in gpusnap's tests; gpusnap itself never writes to it.
func TestLiveForgedKernelMessage(t *testing.T) {
	testenv.Root(t, "writes to the live /dev/kmsg")
	livetest.OwnKernelLog(t)
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	if code, _, stderr := gpusnap(t, "baseline", "--tenant", "forger", "--no-nvml", "--db", db); code != 0 {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	marker := fmt.Sprintf("gpusnap-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	kmsg, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("/dev/kmsg: %v", err)
	}
	// <4>: a warning, as the driver logs Xids; the kernel still gives it LOG_USER.
	_, err = fmt.Fprintf(kmsg, "<4>NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=%s, GPU has fallen off the bus.\n", marker)
	kmsg.Close()
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := gpusnap(t, "diff", "--tenant", "forger", "--no-nvml", "--db", db, "--json")
	var r diff.Result
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("diff: exit %d, %v: %s", code, err, stderr)
	}
	forged := 0
	for _, f := range r.Findings {
		if !strings.Contains(strings.Join(f.Evidence, "\n"), marker) {
			continue
		}
		switch {
		case f.Kind == diff.KindForgedKernelMessage && f.Severity == diff.High && strings.HasPrefix(f.Evidence[0], "12,"):
			forged++
		default:
			t.Errorf("the forged record raised %s %s: %s", f.Kind, f.Severity, f.Summary)
		}
	}
	if forged != 1 || code != 1 {
		t.Errorf("forged_kernel_message findings %d, exit %d; notes %q", forged, code, r.Notes)
	}
	for _, n := range r.Notes {
		if strings.HasPrefix(n, "kernel log:") {
			t.Errorf("a window read whole: note %q", n)
		}
	}
}

// The bundle of a diff across Xids holds the window's kernel-log records as
// the kernel wrote them (raw/kmsg) and puts each Xid on the report's time line.
func TestBundleKernelLog(t *testing.T) {
	dir := scenarioDir("xid-79-tenant")
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	side := func(s string) []string {
		return []string{"--db", db, "--tenant", "xid", "--proc-root", filepath.Join(dir, s, "proc"),
			"--nvml-fixture", filepath.Join(dir, s, "nvml.json"), "--kmsg", filepath.Join(dir, s, "kmsg")}
	}
	if code, _, stderr := gpusnap(t, append([]string{"baseline"}, side("before")...)...); code != 0 {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	out := filepath.Join(t.TempDir(), "incident.tar.gz")
	if code, _, stderr := gpusnap(t, append([]string{"diff", "--bundle", out}, side("after")...)...); code != 1 {
		t.Fatalf("diff: exit %d: %s", code, stderr)
	}
	verifiedManifest(t, out)
	after, err := os.ReadFile(filepath.Join(dir, "after", "kmsg"))
	if err != nil {
		t.Fatal(err)
	}
	// The window is every record after the baseline's position (1005 on).
	_, window, _ := strings.Cut(string(after), "\n4,1005,")
	if got := string(memberOf(t, out, "raw/kmsg")); got != "4,1005,"+window {
		t.Errorf("raw/kmsg:\n%s\nwant the window of after/kmsg:\n4,1005,%s", got, window)
	}
	report := string(memberOf(t, out, "report.md"))
	timeline, _, _ := strings.Cut(report, "## Findings")
	if !strings.Contains(timeline, "- 2025-11-29 07:20:16.000 UTC: xid\\_error: Xid 79 (GPU has fallen off the bus) on GPU 0") {
		t.Errorf("no Xid 79 on the time line:\n%s", timeline)
	}
}
