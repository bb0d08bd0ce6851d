package main

// The real ghost, end to end (root; internal/livetest and docs/testing.md):
// a tenant in its own namespaces and a docker-named cgroup maps a loop device
// node named nvidia0 read-write, forks a ghost and exits. gpusnap diff --tenant
// must report the ghost, with its container, and exit 1; once the ghost is
// killed, the same diff must find nothing of it and exit 0.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
)

func TestLiveDiffGhostInContainer(t *testing.T) {
	livetest.Require(t, "losetup", "gcc", "unshare", "mount")
	loop := livetest.NewLoop(t)
	const tenant = "live-ghost"
	flags := liveBaseline(t, tenant)
	sc := livetest.StartGhost(t, loop, livetest.Options{Container: true})
	ghostKey := (&diff.ProcessRef{PID: sc.Ghost.PID, StartTime: sc.Ghost.StartTime}).Key()

	code, stdout, stderr := gpusnap(t, append([]string{"diff", "--json", "--tenant", tenant}, flags...)...)
	r := decodeResult(t, stdout, stderr)
	if code != 1 {
		t.Errorf("diff with the ghost alive: exit %d, want 1", code)
	}
	got := map[string]diff.Finding{}
	for _, f := range r.Findings {
		if f.Process != nil && f.Process.Key() == ghostKey {
			got[f.Kind+" "+f.Device] = f
			t.Logf("%s %s: %s", f.Severity, f.Kind, f.Summary)
		}
		if f.Process != nil && f.Process.PID == sc.Tenant.PID {
			t.Errorf("a finding about the tenant, which exited: %+v", f)
		}
	}
	for _, kind := range []string{diff.KindLeftoverDeviceMapping, diff.KindLeftoverDeviceHolder} {
		f, ok := got[kind+" "+sc.Path]
		switch {
		case !ok:
			t.Errorf("no %s of %s for the ghost %s; findings: %+v", kind, sc.Path, ghostKey, r.Findings)
		case f.Severity != diff.High:
			t.Errorf("%s: severity %s, want high (the node is mapped and opened read-write)", kind, f.Severity)
		case f.Process.ContainerID != sc.Container.ID:
			t.Errorf("%s: container %q, want %q", kind, f.Process.ContainerID, sc.Container.ID)
		}
	}
	if f := got[diff.KindLeftoverDeviceMapping+" "+sc.Path]; !strings.Contains(strings.Join(f.Evidence, "\n"), "rw-s") ||
		!strings.Contains(strings.Join(f.Evidence, "\n"), "block "+loop.DeviceNumber()) {
		t.Errorf("mapping evidence %q lacks the rw-s line and the loop device's number %s", f.Evidence, loop.DeviceNumber())
	}

	sc.Ghost.Kill(t)
	code, stdout, stderr = gpusnap(t, append([]string{"diff", "--json", "--tenant", tenant}, flags...)...)
	r = decodeResult(t, stdout, stderr)
	var foreign []string
	for _, f := range r.Findings {
		mine := f.Process != nil && (f.Process.ContainerID == sc.Container.ID || f.Process.Key() == ghostKey || f.Process.PID == sc.Tenant.PID)
		switch {
		case mine:
			t.Errorf("after the ghost was killed: %s %s %s", f.Kind, f.Severity, f.Summary)
		case f.Severity >= diff.Medium:
			foreign = append(foreign, f.Summary)
		}
	}
	// Other tests share this host and may start GPU-like processes meanwhile:
	// the exit status is checked when nothing else changed.
	if len(foreign) == 0 && code != 0 {
		t.Errorf("after the ghost was killed: exit %d, want 0", code)
	} else if len(foreign) > 0 {
		t.Logf("other processes on this host changed meanwhile (exit %d): %s", code, strings.Join(foreign, "; "))
	}
}

// liveBaseline takes tenant's baseline of this host, without NVML, in a
// new store, and returns the flags that name that store.
func liveBaseline(t *testing.T, tenant string) []string {
	t.Helper()
	flags := []string{"--db", filepath.Join(t.TempDir(), "gpusnap.db"), "--no-nvml"}
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", tenant}, flags...)...); code != 0 {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	return flags
}

// binDir makes a directory under /var/lib, where jobs and services install
// their binaries (a temp directory would be evidence in why), removed at
// cleanup.
func binDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/lib", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func decodeResult(t *testing.T, stdout, stderr string) diff.Result {
	t.Helper()
	var r diff.Result
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("diff --json: %v: %q %s", err, stdout, stderr)
	}
	return r
}
