package capture_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/snapshot"
)

// A GPU user in a cgroup named for a systemd service gets its unit's
// Restart= and the timer that starts it, from unit directories under the
// capture's unit root (a tree of real files: the host's /etc is not
// touched). A unit in /etc linked out of its directory is not followed; a
// drop-in overrides the unit file, as in systemd.
func TestLiveUnitRestartAndTimer(t *testing.T) {
	livetest.Require(t)
	unit := fmt.Sprintf("gpusnap-test-%d.service", os.Getpid())
	root := t.TempDir()
	write := func(rel, text string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("usr/lib/systemd/system/"+unit, "[Unit]\nDescription=trainer\n[Service]\nExecStart=/opt/t\nRestart=on-failure\n[Install]\nRestart=never-read\n")
	outside := filepath.Join(t.TempDir(), "planted.service")
	if err := os.WriteFile(outside, []byte("[Service]\nRestart=no\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write("etc/systemd/system/.keep", "")
	if err := os.Symlink(outside, filepath.Join(root, "etc/systemd/system", unit)); err != nil {
		t.Fatal(err)
	}
	write("etc/systemd/system/nightly.timer", "[Timer]\nOnCalendar=daily\nUnit="+unit+"\n")
	write("usr/lib/systemd/system/other.timer", "[Timer]\nOnCalendar=hourly\n") // starts other.service
	join := livetest.UnitCgroup(t, unit)
	loop := livetest.NewLoop(t)
	from, err := capture.Capture(t.Context(), capture.Options{UnitRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	// A service's binary lies where services install theirs, not under /tmp
	// (masquerade evidence, which would make the finding high).
	jobDir, err := os.MkdirTemp("/var/lib", "gpusnap-units-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(jobDir) })
	w := livetest.StartWorker(t, loop.Node, livetest.WorkerOptions{Exe: filepath.Join(jobDir, "trainer")})
	join(w.Proc.PID)
	var to *snapshot.Snapshot
	captureWorker := func() *snapshot.Process {
		t.Helper()
		snap, err := capture.Capture(t.Context(), capture.Options{UnitRoot: root})
		if err != nil {
			t.Fatal(err)
		}
		to = snap
		for _, e := range snap.Scan.Errors {
			if strings.HasPrefix(e, "units:") {
				t.Errorf("scan note: %s", e)
			}
		}
		return mustFind(t, snap, w.Proc, "worker")
	}
	p := captureWorker()
	if p.SystemdUnit != unit || p.UnitRestart != "on-failure" || p.UnitTimer != "nightly.timer" {
		t.Errorf("unit %q restart %q timer %q, want %s on-failure nightly.timer (the /etc link out not followed)", p.SystemdUnit, p.UnitRestart, p.UnitTimer, unit)
	}
	// The diff of the two captures: the worker's GPU finding has a
	// persistence finding beside it, naming the restart and the timer.
	var found bool
	for _, f := range diff.Compare(from, to, diff.Options{}).Findings {
		if f.Kind != diff.KindPersistence || f.Process.Key() != p.Key() {
			continue
		}
		found = true
		ev := strings.Join(f.Evidence, "\n")
		if f.Severity != diff.Medium || !strings.Contains(ev, "Restart=on-failure") || !strings.Contains(ev, "timer nightly.timer") {
			t.Errorf("persistence: %s %q, want medium naming Restart=on-failure and nightly.timer", f.Severity, f.Evidence)
		}
	}
	if !found {
		t.Errorf("no persistence finding for the worker %d", w.Proc.PID)
	}
	write("run/systemd/system/"+unit+".d/10-restart.conf", "[Service]\nRestart=always\n")
	if p := captureWorker(); p.UnitRestart != "always" {
		t.Errorf("with a drop-in Restart=always: %q", p.UnitRestart)
	}
	// A malformed or oversized unit is no failure: a huge one is a note.
	write("run/systemd/system/"+unit+".d/20-huge.conf", "[Service]\n"+strings.Repeat("#", 70<<10)+"\n")
	snap, err := capture.Capture(t.Context(), capture.Options{UnitRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	if p := mustFind(t, snap, w.Proc, "worker"); p.UnitRestart != "always" {
		t.Errorf("beside an oversized drop-in: %q, want always", p.UnitRestart)
	}
	if !strings.Contains(strings.Join(snap.Scan.Errors, "\n"), "20-huge.conf: larger than 64 KiB") {
		t.Errorf("an oversized drop-in left no note: %q", snap.Scan.Errors)
	}
	// Where the only unit file is a link out of its directory, what it
	// says is unknown, and the scan says so.
	if err := os.Remove(filepath.Join(root, "usr/lib/systemd/system", unit)); err != nil {
		t.Fatal(err)
	}
	if snap, err = capture.Capture(t.Context(), capture.Options{UnitRoot: root}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(snap.Scan.Errors, "\n"), unit+" is a link to a file outside the unit directories") {
		t.Errorf("a unit linked out of its directory left no note: %q", snap.Scan.Errors)
	}
}
