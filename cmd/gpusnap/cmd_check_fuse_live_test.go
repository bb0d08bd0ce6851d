package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/snapshot"
)

// TestLiveCheckAllowExeOnFUSE: a copy of sleep holding a fake GPU runs from
// a FUSE mount (a passthrough server of the test's, allow_other, as a site
// that sets user_allow_other lets a tenant mount), and another copy from a
// directory on the kernel's own filesystem. Both are allowed by path pinned
// to the file's SHA-256. Once the FUSE copy runs, its server stops
// answering. The pin passes the plain copy (info). The FUSE copy stays a
// finding, and the snapshot names its filesystem: its server, not the
// kernel, answers what the file holds, so no digest of it vouches for what
// runs. The server is never asked: check and snapshot finish.
func TestLiveCheckAllowExeOnFUSE(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("FUSE live test: needs root (mount(2) of /dev/fuse)")
	}
	livetest.Require(t, "losetup")
	loop := livetest.NewLoop(t)
	dir, err := os.MkdirTemp("/run", "gpusnap-fuse-")
	noErr(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	backing, mnt, plain := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt"), filepath.Join(dir, "plain")
	for _, d := range []string{backing, mnt, plain} {
		noErr(t, os.Mkdir(d, 0o755))
	}
	bin, err := os.ReadFile("/usr/bin/sleep")
	noErr(t, err)
	sum := sha256.Sum256(bin)
	for _, d := range []string{backing, plain} {
		noErr(t, os.WriteFile(filepath.Join(d, "sleep"), bin, 0o755))
	}
	server := livetest.StallingFUSE(t, backing, mnt)

	allow := filepath.Join(dir, "allow")
	noErr(t, os.WriteFile(allow, []byte("exe="+mnt+"/sleep sha256="+hex.EncodeToString(sum[:])+"\n"+
		"exe="+plain+"/sleep sha256="+hex.EncodeToString(sum[:])+"\n"), 0o600))
	onFUSE := startHolding(t, false, mnt+"/sleep", "exec 3<>"+loop.Node+"; exec "+mnt+"/sleep 300")
	onDisk := startHolding(t, false, plain+"/sleep", "exec 3<>"+loop.Node+"; exec "+plain+"/sleep 300")
	server.Store(true)

	stdout := gpusnapWithin(t, "check", "--json", "--no-nvml", "--allow", allow)
	var r diff.Result
	noErr(t, json.Unmarshal(stdout, &r))
	got := map[int]diff.Severity{}
	for _, f := range r.Findings {
		if f.Kind == diff.KindGPUInUse && f.Device == loop.Node && f.Process != nil {
			got[f.Process.PID] = f.Severity
		}
	}
	sev, found := got[onFUSE]
	if disk, ok := got[onDisk]; !ok || disk != diff.Info || !found || sev == diff.Info {
		t.Errorf("the pinned copy on disk %d: %q (want info), on FUSE %d: %q (want a finding)\n%s", onDisk, got[onDisk], onFUSE, got[onFUSE], stdout)
	}
	// The snapshot says why: the exe is not hashed, and is named as code no digest vouches for.
	var snap snapshot.Snapshot
	noErr(t, json.Unmarshal(gpusnapWithin(t, "snapshot", "--no-store", "--json", "--no-nvml"), &snap))
	for _, p := range snap.Processes {
		if p.PID != onFUSE && p.PID != onDisk {
			continue
		}
		why := strings.Join(p.RunsForeignCode(), "; ")
		if fuse := strings.Contains(why, mnt+"/sleep: on a fuse.tenantfs filesystem, whose server answers"); fuse != (p.PID == onFUSE) ||
			(p.HashStatus == snapshot.HashOK) == fuse {
			t.Errorf("pid %d (%s): hash %s %s, foreign code %q", p.PID, p.Exe, p.HashStatus, p.ExeSHA256, why)
		}
	}
}
