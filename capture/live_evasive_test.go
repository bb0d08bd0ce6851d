package capture_test

// Live tests of tenants that use a device where one look at /proc misses
// it: a process that changes its PID every few hundred microseconds, a file
// held only as an io_uring's registered file, a mount over /proc/PID.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testwait"
	"github.com/gpusnap/gpusnap/snapshot"
)

// mapsNode reports whether p maps path as an NVIDIA device, read-write shared.
func mapsNode(p *snapshot.Process, path string) bool {
	for _, m := range p.Mappings {
		if m.Path == path && m.Class == snapshot.ClassNVIDIA && m.Perms == "rw-s" {
			return true
		}
	}
	return false
}

// TestLiveHopper: a process maps the node rw-s, closes the fd, then forks
// and exits every 50-500 us under a child subreaper. One listing of /proc
// read in PID order finds each listed hopper gone; the capture lists again
// and follows the subreaper's children until it reads one, in each of 5
// captures, or says it did not settle.
func TestLiveHopper(t *testing.T) {
	livetest.Require(t, "losetup", "gcc")
	loop := livetest.NewLoop(t)
	reaper := livetest.Hop(t, loop.Node)
	for _, path := range []string{capture.PathProc, capture.PathBPF} {
		seen := 0
		for range 5 {
			snap := capturePath(t, path)
			var users []int
			for i := range snap.Processes {
				if p := &snap.Processes[i]; mapsNode(p, loop.Node) {
					users = append(users, p.PID)
				}
			}
			switch {
			case len(users) > 0:
				seen++
			case snap.Scan.Unsettled == "":
				t.Errorf("%s: no hopper of subreaper %d seen, and the scan says it settled (%d relists, %d vanished)",
					path, reaper.PID, snap.Scan.Relists, snap.Scan.Vanished)
			default:
				t.Logf("%s: unsettled: %s", path, snap.Scan.Unsettled)
			}
			t.Logf("%s: hoppers %v, %d relists, %d vanished", path, users, snap.Scan.Relists, snap.Scan.Vanished)
		}
		if seen == 0 {
			t.Errorf("%s: no capture of 5 saw a hopper", path)
		}
	}
}

// TestLiveRegisteredFile: the node opened read-write, registered with an
// io_uring and closed: /proc/PID/fd shows only the ring. Either capture path
// reads the ring's fdinfo (the BPF path's file iterator marks the process
// that holds a ring) and keeps the registered file as a holder (slot 0,
// taken as read-write), and says it took it so.
func TestLiveRegisteredFile(t *testing.T) {
	livetest.Require(t, "losetup", "gcc")
	loop := livetest.NewLoop(t)
	p := livetest.HoldRegistered(t, loop.Node)
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(p.PID) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if target, _ := os.Readlink("/proc/" + strconv.Itoa(p.PID) + "/fd/" + fd.Name()); target == loop.Node {
			t.Fatalf("the tenant still has fd %s on %s: the test needs the ring to hold it alone", fd.Name(), target)
		}
	}
	for _, path := range []string{capture.PathProc, capture.PathBPF} {
		snap := capturePath(t, path)
		q := mustFind(t, snap, p, "io_uring tenant")
		var got []snapshot.Holder
		for _, h := range q.Holders {
			if h.Target == loop.Node {
				got = append(got, h)
			}
		}
		if len(got) != 1 || got[0].RingSlot == nil || *got[0].RingSlot != 0 || got[0].Class != snapshot.ClassNVIDIA || got[0].Access != "rw" {
			t.Errorf("%s: holders of %s: %+v, want one NVIDIA holder in ring slot 0, access rw; errors %q", path, loop.Node, got, q.Errors)
			continue
		}
		if !q.UsesNVIDIA() || !strings.Contains(strings.Join(q.Errors, "\n"), "taken as open read-write") {
			t.Errorf("%s: the capture does not say the registered file's access was taken as rw: errors %q", path, q.Errors)
		}
		if len(q.Unreadable) > 0 {
			t.Errorf("%s: the ring was read, yet the process is unreadable: %q %q", path, q.Unreadable, q.Errors)
		}
	}
}

// TestLiveHiddenProcess: an empty directory, then a tmpfs holding a made-up
// stat and cgroup, mounted over /proc/PID of a process that maps the node.
// Either capture path records the PID as hidden (the kernel still has it)
// and reads nothing of the mounted tree as the process (the BPF path keeps
// the mapping its kernel walk saw); once the process
// has exited and been reaped, with the mount still there, the PID is no
// longer hidden.
func TestLiveHiddenProcess(t *testing.T) {
	livetest.Require(t, "losetup", "gcc", "mount")
	// Owned before its processes start: one held while this waits for the
	// lock would meet the quiet tests' whole-host verdicts (docs/testing.md).
	livetest.OwnNoisyHost(t)
	loop := livetest.NewLoop(t)
	fakeStat := "1 (bash) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1\n"
	for _, fake := range []map[string]string{nil, {"stat": fakeStat, "cgroup": "0::/system.slice/sshd.service\n"}} {
		pid := livetest.Hold(t, loop.Node).PID
		livetest.HideProc(t, pid, fake)
		for _, path := range []string{capture.PathProc, capture.PathBPF} {
			snap := capturePath(t, path)
			var why string
			for _, h := range snap.Scan.Hidden {
				if h.PID == pid {
					why = h.Why
				}
			}
			if why == "" || !strings.Contains(why, "pidfd_open") {
				t.Errorf("%s, fake files %v: pid %d not hidden (why %q); hidden %+v", path, fake != nil, pid, why, snap.Scan.Hidden)
			}
			for _, q := range snap.Processes {
				if q.PID != pid {
					continue
				}
				// The BPF path keeps what its kernel walk saw (the
				// mapping); nothing may come of the mounted tree.
				switch {
				case path == capture.PathProc:
					t.Errorf("%s: the mounted tree was read as pid %d: %+v", path, pid, q)
				case q.Comm == "bash" || strings.Contains(strings.Join(q.Cgroups, "\n"), "sshd") || q.Raw != nil || !mapsNode(&q, loop.Node):
					t.Errorf("%s: pid %d kept with the mounted tree's text, or without its mapping: %+v", path, pid, q)
				}
			}
			t.Logf("%s: %s", path, why)
		}
		// Its /proc/PID no longer says whether it lives: kill it by PID (its
		// identity was checked before the mount) and wait until the harness,
		// its parent, has reaped it.
		if err := unix.Kill(pid, unix.SIGKILL); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 20*time.Second, fmt.Sprintf("pid %d to be reaped after SIGKILL", pid), func() bool {
			return errors.Is(unix.Kill(pid, 0), unix.ESRCH)
		})
		snap := capturePath(t, capture.PathProc)
		for _, h := range snap.Scan.Hidden {
			if h.PID == pid {
				t.Errorf("pid %d exited, yet hidden: %s", pid, h.Why)
			}
		}
	}
}

// TestLiveProcBoundOver: root binds another live process's /proc directory
// over a ghost's. The same procfs, a real process's files: its stat names
// the other PID, so the ghost's directory does not read as the ghost, and a
// PID the kernel still has is hidden_process on both paths.
func TestLiveProcBoundOver(t *testing.T) {
	livetest.Require(t, "losetup", "gcc", "sleep")
	// Owned before its processes start: one held while this waits for the
	// lock would meet the quiet tests' whole-host verdicts (docs/testing.md).
	livetest.OwnNoisyHost(t)
	loop := livetest.NewLoop(t)
	pid := livetest.Hold(t, loop.Node).PID
	decoy := exec.Command("sleep", "300")
	if err := decoy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = decoy.Process.Kill(); _ = decoy.Wait() })
	livetest.HideProcBehind(t, pid, decoy.Process.Pid)
	for _, path := range []string{capture.PathProc, capture.PathBPF} {
		snap := capturePath(t, path)
		var why string
		for _, h := range snap.Scan.Hidden {
			if h.PID == pid {
				why = h.Why
			}
		}
		if !strings.Contains(why, "pidfd_open") {
			t.Errorf("%s: pid %d behind pid %d's directory is not hidden (why %q)", path, pid, decoy.Process.Pid, why)
		}
		for _, q := range snap.Processes {
			if q.PID == pid && q.Comm == "sleep" {
				t.Errorf("%s: pid %d read as the decoy: %+v", path, pid, q)
			}
		}
	}
}

// TestLiveHiddenWithoutDevice: the same mounts (an empty directory, a tmpfs
// of made-up files, another process's directory bound) over /proc/PID of a
// process that maps no device, which the BPF path completes from /proc
// itself rather than leaving it to the /proc path. Each path records the PID
// as hidden and reads nothing of the mounted tree as the process.
func TestLiveHiddenWithoutDevice(t *testing.T) {
	livetest.Require(t, "sleep", "mount")
	// Owned before its processes start: one held while this waits for the
	// lock would meet the quiet tests' whole-host verdicts (docs/testing.md).
	livetest.OwnNoisyHost(t)
	fakeStat := "1 (bash) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1\n"
	decoy := exec.Command("sleep", "300")
	if err := decoy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = decoy.Process.Kill(); _ = decoy.Wait() })
	for _, how := range []string{"empty", "fake", "bound"} {
		plain := exec.Command("sleep", "300")
		if err := plain.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = plain.Process.Kill(); _ = plain.Wait() })
		pid := plain.Process.Pid
		switch how {
		case "empty":
			livetest.HideProc(t, pid, nil)
		case "fake":
			livetest.HideProc(t, pid, map[string]string{"stat": fakeStat, "cgroup": "0::/system.slice/sshd.service\n"})
		default:
			livetest.HideProcBehind(t, pid, decoy.Process.Pid)
		}
		for _, path := range []string{capture.PathProc, capture.PathBPF} {
			snap := capturePath(t, path)
			hidden := slices.ContainsFunc(snap.Scan.Hidden, func(h snapshot.HiddenProcess) bool {
				return h.PID == pid && strings.Contains(h.Why, "pidfd_open")
			})
			if !hidden {
				t.Errorf("%s, %s mount: pid %d not hidden; hidden %+v", path, how, pid, snap.Scan.Hidden)
			}
			// The BPF path keeps what its kernel walks saw (the fds on
			// /dev/null the harness gave it); nothing may come of the tree.
			for _, q := range snap.Processes {
				if q.PID == pid && (path == capture.PathProc || q.Comm != "sleep" || len(q.Cgroups) > 0 || q.Raw != nil || len(q.Holders) == 0) {
					t.Errorf("%s, %s mount: pid %d kept with the mounted tree's text: %+v", path, how, pid, q)
				}
			}
		}
	}
}

// TestLiveHiddenDuringFillIn: where no mount lies under a process directory,
// the BPF path's fill-in reads in /proc without proving each directory its
// own, watched by mountinfo's poll. A mount over a process's directory made
// once those reads are done (the hook) is seen: the walk is taken again with
// each directory proven, and the PID is hidden with nothing of the mounted
// tree read as it. Without the mount, the unproven read gives the exe that
// /proc/PID/exe gives. Another test's mount under /proc (this host is
// shared) leaves nothing to watch, or moves the watch: the capture is then
// taken again, a few times at most.
func TestLiveHiddenDuringFillIn(t *testing.T) {
	livetest.Require(t, "sleep", "mount")
	// Taken here, not by the mount in the capture's hook, where waiting on
	// another package's quiet test would stall the capture.
	livetest.OwnNoisyHost(t)
	fakeStat := "1 (bash) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1\n"
	for _, mount := range []bool{false, true} {
		plain := exec.Command("sleep", "300")
		if err := plain.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = plain.Process.Kill(); _ = plain.Wait() })
		pid := plain.Process.Pid
		exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		if err != nil {
			t.Fatal(err)
		}
		var snap *snapshot.Snapshot
		watched, mounted := false, false
		for try := 0; try < 5 && !(watched && (mount || !strings.Contains(snap.Scan.CaptureNote, "walked again"))); try++ {
			watched = false
			restore := capture.OnFillInRead(func() {
				watched = true
				if mount && !mounted {
					mounted = true
					livetest.HideProc(t, pid, map[string]string{"stat": fakeStat, "cgroup": "0::/system.slice/sshd.service\n"})
				}
			})
			snap = capturePath(t, capture.PathBPF)
			restore()
		}
		if !watched {
			t.Fatalf("mount %v: no capture read without proving directories in 5 tries (note %q)", mount, snap.Scan.CaptureNote)
		}
		var q *snapshot.Process
		if i := slices.IndexFunc(snap.Processes, func(p snapshot.Process) bool { return p.PID == pid }); i >= 0 {
			q = &snap.Processes[i]
		}
		if !mount {
			if q == nil || q.Exe != exe {
				t.Errorf("pid %d: the unproven fill-in gave %+v, want exe %q", pid, q, exe)
			}
			continue
		}
		if !strings.Contains(snap.Scan.CaptureNote, "walked again with each directory proven") {
			t.Errorf("a mount made during the fill-in, yet the walk was not taken again: note %q", snap.Scan.CaptureNote)
		}
		if !slices.ContainsFunc(snap.Scan.Hidden, func(h snapshot.HiddenProcess) bool {
			return h.PID == pid && strings.Contains(h.Why, "pidfd_open")
		}) {
			t.Errorf("pid %d, mounted over during the fill-in, not hidden: %+v", pid, snap.Scan.Hidden)
		}
		if q != nil && (q.Comm != "sleep" || len(q.Cgroups) > 0 || q.Raw != nil) {
			t.Errorf("pid %d kept with the mounted tree's text: %+v", pid, q)
		}
	}
}
