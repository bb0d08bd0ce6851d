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
)

// As root on the live /dev/kmsg: a line in the NVIDIA driver's words written
// from user space (as any root process, or a container allowed to, can) is a
// forged_kernel_message and never an xid_error. The only write to /dev/kmsg
// in gpusnap's tests; gpusnap itself never writes to it.
func TestLiveForgedKernelMessage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: writing /dev/kmsg needs root")
	}
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
