package main

// Fail closed, end to end on real processes (root; internal/livetest): a
// ghost left by a tenant is reported, exit 1, whatever else goes wrong after
// the host has been seen.

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
)

// ghostFindings returns the kinds of the findings about process pid@start.
func ghostFindings(r diff.Result, sc *livetest.Scenario) map[string]diff.Severity {
	got := map[string]diff.Severity{}
	for _, f := range r.Findings {
		if f.Process != nil && f.Process.PID == sc.Ghost.PID && f.Process.StartTime == sc.Ghost.StartTime {
			got[f.Kind] = f.Severity
		}
	}
	return got
}

// wantGhostReported checks that a diff --json exited 1 and reported the
// ghost's read-write mapping as high.
func wantGhostReported(t *testing.T, what string, code int, stdout, stderr string, sc *livetest.Scenario) {
	t.Helper()
	r := decodeResult(t, stdout, stderr)
	if code != exitFindings {
		t.Errorf("%s: exit %d, want 1; stderr %q", what, code, stderr)
	}
	if sev, ok := ghostFindings(r, sc)[diff.KindLeftoverDeviceMapping]; !ok || sev != diff.High {
		t.Errorf("%s: no high %s for the ghost %d; findings %+v", what, diff.KindLeftoverDeviceMapping, sc.Ghost.PID, r.Findings)
	}
}

// fullTmpfs mounts a tmpfs of size bytes on a new directory and returns it;
// Cleanup unmounts it.
func fullTmpfs(t *testing.T, size string) string {
	t.Helper()
	livetest.Require(t, "mount", "umount")
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0755", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("live test: cannot mount a tmpfs here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fill writes zeros to a new file in dir until the filesystem is full.
func fill(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			return
		}
	}
}

// TestLiveDiffFullStoreStillReportsGhost: the store's disk fills up between
// the baseline and the diff. The post snapshot cannot be stored, but the
// ghost is reported and the diff exits 1, with the failed write one line on
// stderr.
func TestLiveDiffFullStoreStillReportsGhost(t *testing.T) {
	livetest.Require(t, "losetup", "gcc")
	disk := fullTmpfs(t, "8m")
	flags := []string{"--db", filepath.Join(disk, "gpusnap.db"), "--no-nvml"}
	const tenant = "full-disk"
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", tenant}, flags...)...); code != 0 {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	sc := livetest.StartGhost(t, livetest.NewLoop(t), livetest.Options{})
	fill(t, disk)

	code, stdout, stderr := gpusnap(t, append([]string{"diff", "--json", "--tenant", tenant}, flags...)...)
	wantGhostReported(t, "diff on a full disk", code, stdout, stderr, sc)
	if !strings.Contains(stderr, "not stored") || !strings.Contains(stderr, "no space left on device") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("diff on a full disk: stderr %q, want one line saying the post snapshot was not stored", stderr)
	}
	// Text too: the findings, then the line.
	code, stdout, stderr = gpusnap(t, append([]string{"diff", "--tenant", tenant}, flags...)...)
	if code != exitFindings || !strings.Contains(stdout, "leftover_device_mapping") || !strings.Contains(stderr, "no space left on device") {
		t.Errorf("text diff on a full disk: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestLiveDiffBundleRefusedStillReportsGhost: an epilog run again finds its
// bundle file there (or its directory gone): the diff still runs, reports
// the ghost and exits 1; the refused bundle is a line on stderr and the
// existing file is untouched.
func TestLiveDiffBundleRefusedStillReportsGhost(t *testing.T) {
	livetest.Require(t, "losetup", "gcc")
	dir := t.TempDir()
	flags := []string{"--db", filepath.Join(dir, "gpusnap.db"), "--no-nvml"}
	const tenant = "bundle-refused"
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", tenant}, flags...)...); code != 0 {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	sc := livetest.StartGhost(t, livetest.NewLoop(t), livetest.Options{})
	existing := filepath.Join(dir, "incident.tar.gz")
	if err := os.WriteFile(existing, []byte("the first run's evidence"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ bundle, want string }{
		{existing, "exists (use --force"},
		{filepath.Join(dir, "gone", "incident.tar.gz"), "does not exist"},
	} {
		code, stdout, stderr := gpusnap(t, append([]string{"diff", "--json", "--tenant", tenant, "--bundle", c.bundle}, flags...)...)
		wantGhostReported(t, "diff --bundle "+c.bundle, code, stdout, stderr, sc)
		if !strings.Contains(stderr, "bundle: ") || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("diff --bundle %s: stderr %q, want one line with %q", c.bundle, stderr, c.want)
		}
	}
	if b, _ := os.ReadFile(existing); string(b) != "the first run's evidence" {
		t.Error("the existing bundle was changed")
	}
}
