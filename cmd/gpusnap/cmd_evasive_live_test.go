package main

// Tenants that use a device where one look at /proc misses it (root;
// internal/livetest): a process that forks and exits every 50-500 us, a
// node held only as an io_uring's registered file, a mount over /proc/PID.
// diff --tenant and check must each exit 1 with the finding that names it.

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
)

func TestLiveDiffAndCheckEvasive(t *testing.T) {
	livetest.Require(t, "losetup", "gcc", "mount")
	// A node held only as an io_uring's registered file: each capture path
	// must find it.
	registered := func(t *testing.T, node string) func(diff.Finding, bool) bool {
		p := livetest.HoldRegistered(t, node)
		return func(f diff.Finding, check bool) bool {
			kind := diff.KindLeftoverDeviceHolder
			if check {
				kind = diff.KindGPUInUse
			}
			return f.Kind == kind && f.Device == node && f.Process.PID == p.PID && f.Severity == diff.High
		}
	}
	cases := []struct {
		name    string
		capture string // --capture: auto takes the BPF path where the kernel allows it
		// start starts the tenant on node; it returns whether a finding is
		// the tenant's (of diff, or with check set, of check).
		start func(t *testing.T, node string) func(f diff.Finding, check bool) bool
	}{
		{"hopper", "auto", func(t *testing.T, node string) func(diff.Finding, bool) bool {
			livetest.Hop(t, node)
			return func(f diff.Finding, check bool) bool {
				kind := diff.KindLeftoverDeviceMapping
				if check {
					kind = diff.KindGPUInUse
				}
				return f.Kind == kind && f.Device == node && f.Severity == diff.High
			}
		}},
		{"io_uring", "proc", registered},
		{"io_uring auto", "auto", registered},
		{"mount over /proc/PID", "auto", func(t *testing.T, node string) func(diff.Finding, bool) bool {
			// Owned before the tenant starts: one held while this waits for
			// the lock would meet the quiet tests' whole-host verdicts.
			livetest.OwnNoisyHost(t)
			p := livetest.Hold(t, node)
			livetest.HideProc(t, p.PID, nil)
			return func(f diff.Finding, _ bool) bool {
				return f.Kind == diff.KindHiddenProcess && f.Process.PID == p.PID && f.Severity == diff.High
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			loop := livetest.NewLoop(t)
			flags := []string{"--db", filepath.Join(t.TempDir(), "gpusnap.db"), "--no-nvml", "--capture", tc.capture}
			const tenant = "evasive"
			if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", tenant}, flags...)...); code != 0 {
				t.Fatalf("baseline: exit %d: %s", code, stderr)
			}
			mine := tc.start(t, loop.Node)
			for _, cmd := range [][]string{{"diff", "--tenant", tenant}, {"check"}} {
				// A hopper may outrun a capture, which then says so: the
				// command is run again, up to three times.
				for try := 1; ; try++ {
					code, stdout, stderr := gpusnap(t, append(append([]string{cmd[0], "--json"}, cmd[1:]...), flags...)...)
					var r diff.Result
					if err := json.Unmarshal([]byte(stdout), &r); err != nil {
						t.Fatalf("%s: %v: %q %s", cmd[0], err, stdout, stderr)
					}
					found := false
					for _, f := range r.Findings {
						found = found || f.Process != nil && mine(f, cmd[0] == "check")
					}
					if found && code == exitFindings {
						break
					}
					unsettled := strings.Contains(strings.Join(r.Notes, "\n"), "did not settle")
					if try == 3 || !unsettled {
						t.Fatalf("%s: exit %d, the tenant's finding found %v; findings %+v notes %q", cmd[0], code, found, r.Findings, r.Notes)
					}
					t.Logf("%s: try %d did not settle: %q", cmd[0], try, r.Notes)
				}
			}
		})
	}
}
