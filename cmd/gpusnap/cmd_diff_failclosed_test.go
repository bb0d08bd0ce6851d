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
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testwait"
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
		// Whether the ghost still ran, and what the diff said of its
		// capture, tell a missed mapping from a ghost gone.
		t.Errorf("%s: no high %s for the ghost %d (alive now: %v); findings %+v; notes %q", what, diff.KindLeftoverDeviceMapping,
			sc.Ghost.PID, sc.Ghost.Alive(), r.Findings, r.Notes)
	}
}

// failureLines are the lines of stderr but the partial capture's (PID 1 of
// a container refuses reads even to root).
func failureLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
		if l != "" && !strings.HasPrefix(l, "gpusnap: partial capture: ") {
			out = append(out, l)
		}
	}
	return out
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
	disk := fullTmpfs(t, "32m")
	flags := []string{"--db", filepath.Join(disk, "gpusnap.db"), "--no-nvml"}
	const tenant = "full-disk"
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", tenant}, flags...)...); code != 0 {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	sc := livetest.StartGhost(t, livetest.NewLoop(t), livetest.Options{})
	fill(t, disk)

	code, stdout, stderr := gpusnap(t, append([]string{"diff", "--json", "--tenant", tenant}, flags...)...)
	wantGhostReported(t, "diff on a full disk", code, stdout, stderr, sc)
	if l := failureLines(stderr); len(l) != 1 || !strings.Contains(l[0], "not stored") || !strings.Contains(l[0], "no space left on device") {
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
		if l := failureLines(stderr); len(l) != 1 || !strings.Contains(l[0], "bundle: ") || !strings.Contains(l[0], c.want) {
			t.Errorf("diff --bundle %s: stderr %q, want one line with %q", c.bundle, stderr, c.want)
		}
	}
	if b, _ := os.ReadFile(existing); string(b) != "the first run's evidence" {
		t.Error("the existing bundle was changed")
	}
}

// TestLiveDiffLeaderExitedStillReportsDevice: a tenant maps the device
// read-write and ends its main thread while three threads keep it. /proc/PID
// shows a zombie with no maps and no fds; the diff reads the process through
// a live thread and reports the mapping and the holder.
func TestLiveDiffLeaderExitedStillReportsDevice(t *testing.T) {
	livetest.Require(t, "losetup", "gcc")
	loop := livetest.NewLoop(t)
	// Both capture paths; /proc reads the process through task/TID.
	for _, capture := range []string{"proc", "auto"} {
		t.Run(capture, func(t *testing.T) {
			flags := []string{"--db", filepath.Join(t.TempDir(), "gpusnap.db"), "--no-nvml", "--capture", capture}
			const tenant = "leader-exited"
			if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", tenant}, flags...)...); code != 0 {
				t.Fatalf("baseline: exit %d: %s", code, stderr)
			}
			p := livetest.HoldLeaderExited(t, loop.Node)
			code, stdout, stderr := gpusnap(t, append([]string{"diff", "--json", "--tenant", tenant}, flags...)...)
			r := decodeResult(t, stdout, stderr)
			if code != exitFindings {
				t.Errorf("exit %d, want 1; stderr %q", code, stderr)
			}
			got := map[string]diff.Severity{}
			for _, f := range r.Findings {
				if f.Process != nil && f.Process.PID == p.PID && f.Process.StartTime == p.StartTime && f.Device == loop.Node {
					got[f.Kind] = f.Severity
				}
			}
			for _, kind := range []string{diff.KindLeftoverDeviceMapping, diff.KindLeftoverDeviceHolder} {
				if got[kind] != diff.High {
					t.Errorf("%s of %s by %d: %v, want high; findings %+v", kind, loop.Node, p.PID, got, r.Findings)
				}
			}
		})
	}
}

// asNobody returns a runner of gpusnap as a real process of uid and gid
// 65534 with no groups (setpriv), and a directory that user can write: this
// test binary is copied there, since the build directory is root's alone.
func asNobody(t *testing.T) (run func(args ...string) (int, string, string), dir string) {
	t.Helper()
	livetest.Require(t, "setpriv")
	dir, err := os.MkdirTemp("", "gpusnap-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	self := filepath.Join(dir, "gpusnap.test")
	if err := os.WriteFile(self, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	return func(args ...string) (int, string, string) {
		t.Helper()
		cmd := gpusnapProc(args...)
		cmd.Args = append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", self}, cmd.Args[1:]...)
		cmd.Path, _ = exec.LookPath("setpriv")
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			return exit.ExitCode(), stdout.String(), stderr.String()
		case err != nil:
			t.Fatalf("setpriv %q: %v", args, err)
		}
		return 0, stdout.String(), stderr.String()
	}, dir
}

// TestLiveDiffAsUserReportsUnreadableGhost: run as a user who is not root,
// gpusnap cannot read root's processes. A root ghost that maps the device
// read-write after the baseline is new and unreadable at TO: an
// unreadable_process finding, exit 1, and no "clean". The partial capture is
// one short line of counts on stderr, not a list of PIDs.
func TestLiveDiffAsUserReportsUnreadableGhost(t *testing.T) {
	livetest.Require(t, "losetup", "gcc")
	nobody, dir := asNobody(t)
	flags := []string{"--db", filepath.Join(dir, "gpusnap.db"), "--no-nvml"}
	const tenant = "as-user"
	code, _, stderr := nobody(append([]string{"baseline", "--tenant", tenant}, flags...)...)
	if code != 0 {
		t.Fatalf("baseline as uid 65534: exit %d: %s", code, stderr)
	}
	if !strings.HasPrefix(stderr, "gpusnap: partial capture: ") || !strings.Contains(stderr, "run as root") ||
		strings.Count(stderr, "\n") != 1 || len(stderr) > 200 {
		t.Errorf("baseline as uid 65534: stderr %q, want one short line of counts", stderr)
	}
	sc := livetest.StartGhost(t, livetest.NewLoop(t), livetest.Options{})

	code, stdout, stderr := nobody(append([]string{"diff", "--json", "--tenant", tenant}, flags...)...)
	r := decodeResult(t, stdout, stderr)
	if code != exitFindings {
		t.Errorf("diff as uid 65534: exit %d, want 1; stderr %q", code, stderr)
	}
	if sev, ok := ghostFindings(r, sc)[diff.KindUnreadableProcess]; !ok || sev != diff.Medium {
		t.Errorf("no medium %s for the root ghost %d; findings %+v", diff.KindUnreadableProcess, sc.Ghost.PID, r.Findings)
	}
	if r.Complete {
		t.Error("a diff that could not read root's processes says it is complete")
	}
	for _, n := range r.Notes {
		if len(n) > 400 {
			t.Errorf("a note of %d bytes (a PID list?): %.200s...", len(n), n)
		}
	}
	code, stdout, _ = nobody(append([]string{"diff", "--tenant", tenant}, flags...)...)
	// The verdict is the first line; other lines quote processes' command lines (podman's "--exit-command-arg cleanup").
	verdict, _, _ := strings.Cut(stdout, "\n")
	if code != exitFindings || strings.Contains(verdict, "clean") || !strings.Contains(stdout, diff.KindUnreadableProcess) {
		t.Errorf("text diff as uid 65534: exit %d\n%s", code, stdout)
	}
}

// TestLiveDiffFailOnCriticalIsRefused: no rule raises critical, so --fail-on
// critical would let a host with a read-write ghost pass with exit 0. It is
// refused (exit 2, one line) before anything is captured; the same diff at
// --fail-on high reports the ghost and exits 1.
func TestLiveDiffFailOnCriticalIsRefused(t *testing.T) {
	livetest.Require(t, "losetup", "gcc")
	dir := t.TempDir()
	flags := []string{"--db", filepath.Join(dir, "gpusnap.db"), "--no-nvml"}
	const tenant = "fail-on"
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", tenant}, flags...)...); code != 0 {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	sc := livetest.StartGhost(t, livetest.NewLoop(t), livetest.Options{})
	args := append([]string{"diff", "--json", "--tenant", tenant, "--fail-on", "critical"}, flags...)
	code, stdout, stderr := gpusnap(t, args...)
	oneLine(t, args, code, stdout, stderr, "--fail-on: no finding is ever critical")
	args = append([]string{"check", "--json", "--fail-on", "critical"}, flags...)
	code, stdout, stderr = gpusnap(t, args...)
	oneLine(t, args, code, stdout, stderr, "--fail-on: no finding is ever critical")
	code, stdout, stderr = gpusnap(t, append([]string{"diff", "--json", "--tenant", tenant, "--fail-on", "high"}, flags...)...)
	wantGhostReported(t, "diff --fail-on high", code, stdout, stderr, sc)
}

// TestLiveDiffMasqueradeEvidence: a ghost that renamed itself kworker/u8:3
// from an exe named like an interpreter is a user process named like a
// kernel thread: its unexpected_gpu_process is high. The same ghost run
// from a user's ~/.pyenv under its own name is a per-user toolchain, not a
// hidden directory: medium.
func TestLiveDiffMasqueradeEvidence(t *testing.T) {
	livetest.Require(t, "losetup", "gcc")
	home, err := os.MkdirTemp("/home", "gpusnap-live-")
	if err != nil {
		t.Skipf("live test: no /home to make a user's directory in: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	loop := livetest.NewLoop(t)
	for _, c := range []struct {
		name string
		opts livetest.Options
		want diff.Severity
		sign string
	}{
		{"kernel-thread-name", livetest.Options{Exe: filepath.Join(home, "bin", "python3.11"), GhostComm: "kworker/u8:3"}, diff.High, "named like a kernel thread"},
		{"pyenv", livetest.Options{Exe: filepath.Join(home, ".pyenv", "versions", "3.11.9", "bin", "python3.11")}, diff.Medium, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			flags := []string{"--db", filepath.Join(dir, "gpusnap.db"), "--no-nvml"}
			if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", c.name}, flags...)...); code != 0 {
				t.Fatalf("baseline: exit %d: %s", code, stderr)
			}
			sc := livetest.StartGhost(t, loop, c.opts)
			code, stdout, stderr := gpusnap(t, append([]string{"diff", "--json", "--tenant", c.name}, flags...)...)
			r := decodeResult(t, stdout, stderr)
			if code != exitFindings {
				t.Errorf("exit %d, want 1", code)
			}
			found := false
			for _, f := range r.Findings {
				if f.Kind != diff.KindUnexpectedGPUProcess || f.Process == nil || f.Process.PID != sc.Ghost.PID {
					continue
				}
				found = true
				ev := strings.Join(f.Evidence, "\n")
				if f.Severity != c.want || (c.sign != "" && !strings.Contains(ev, c.sign)) || (c.sign == "" && strings.Contains(ev, "masquerade")) {
					t.Errorf("%s of %s (comm %q): %s, evidence:\n%s\nwant %s with %q", f.Kind, f.Process.Exe, f.Process.Comm, f.Severity, ev, c.want, c.sign)
				}
			}
			if !found {
				t.Errorf("no %s for the ghost %d: %+v", diff.KindUnexpectedGPUProcess, sc.Ghost.PID, r.Findings)
			}
			sc.Ghost.Kill(t)
		})
	}
}

// TestReaderBlockedOnStdoutHoldsNoLock: `gpusnap show --json ID | less`
// with less not reading: the reader, a real process, blocks writing its
// stdout. A prolog's baseline must still get the store at once.
func TestReaderBlockedOnStdoutHoldsNoLock(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	flags := []string{"--db", db, "--no-nvml"}
	code, stdout, stderr := gpusnap(t, append([]string{"snapshot"}, flags...)...)
	if code != 0 {
		t.Fatalf("snapshot: exit %d: %s", code, stderr)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	show := gpusnapProc(append([]string{"show", "--json", lastLine(stdout)}, flags...)...)
	show.Stdout = w
	if err := show.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	defer func() { _ = show.Process.Kill(); _ = show.Wait() }()
	// One byte read: show has read the store and is writing; the rest of the
	// snapshot's JSON (far more than a pipe holds) is left unread.
	if _, err := r.Read(make([]byte, 1)); err != nil {
		t.Fatalf("show --json wrote nothing: %v", err)
	}
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", "next-job", "--lock-timeout", "2s"}, flags...)...); code != 0 {
		t.Errorf("baseline while a reader is blocked on its stdout: exit %d: %s", code, stderr)
	}
}

// withLibrary runs cmd with the libnvidia-ml.so.1 in dir loaded first.
func withLibrary(cmd *exec.Cmd, dir string) *exec.Cmd {
	cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+dir)
	return cmd
}

// runProc runs cmd and returns its exit status and output.
func runProc(t *testing.T, cmd *exec.Cmd) (int, string, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	case err != nil:
		t.Fatalf("%q: %v", cmd.Args, err)
	}
	return 0, stdout.String(), stderr.String()
}

// TestLiveDiffHungNVMLTimesOut: libnvidia-ml's nvmlInit_v2 never returns (a
// hung driver; a real library built by the test, loaded by go-nvml's
// dlopen). Baseline and diff give up on it after --nvml-timeout, record
// "timed out", and the diff still reports the ghost, exit 1.
func TestLiveDiffHungNVMLTimesOut(t *testing.T) {
	livetest.Require(t, "losetup", "gcc")
	lib := livetest.HungNVML(t)
	flags := []string{"--db", filepath.Join(t.TempDir(), "gpusnap.db"), "--nvml-timeout", "1s"}
	const tenant = "hung-nvml"
	code, _, stderr := runProc(t, withLibrary(gpusnapProc(append([]string{"baseline", "--tenant", tenant}, flags...)...), lib))
	if code != 0 {
		t.Fatalf("baseline with a hung NVML: exit %d: %s", code, stderr)
	}
	sc := livetest.StartGhost(t, livetest.NewLoop(t), livetest.Options{})
	start := time.Now()
	code, stdout, stderr := runProc(t, withLibrary(gpusnapProc(append([]string{"diff", "--json", "--tenant", tenant}, flags...)...), lib))
	wantGhostReported(t, "diff with a hung NVML", code, stdout, stderr, sc)
	r := decodeResult(t, stdout, stderr)
	if !strings.Contains(strings.Join(r.Notes, "\n"), "timed out after 1s") || r.Complete {
		t.Errorf("notes %q (complete %v): want NVML timed out, memory not compared", r.Notes, r.Complete)
	}
	t.Logf("diff with a hung NVML and --nvml-timeout 1s took %s", time.Since(start))
	// --require-nvml makes it an error.
	code, _, stderr = runProc(t, withLibrary(gpusnapProc(append([]string{"snapshot", "--require-nvml"}, flags...)...), lib))
	if code != exitError || !strings.Contains(stderr, "timed out") {
		t.Errorf("snapshot --require-nvml with a hung NVML: exit %d, stderr %q", code, stderr)
	}
}

// TestHungNVMLEndsOnSIGTERM: with a long --nvml-timeout, SIGTERM still
// ends a snapshot stuck on a hung driver, at once, exit 2.
func TestHungNVMLEndsOnSIGTERM(t *testing.T) {
	lib := livetest.HungNVML(t)
	entered := filepath.Join(t.TempDir(), "entered")
	cmd := withLibrary(gpusnapProc("snapshot", "--no-store", "--nvml-timeout", "1h"), lib)
	cmd.Env = append(cmd.Env, livetest.HungNVMLEnteredEnv+"="+entered)
	var stderr livetest.LockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer cmd.Process.Kill()
	// Wait until it is stuck in the library: the hung nvmlInit_v2 says so.
	ended := false
	err := testwait.For(time.Minute, "the snapshot to call nvmlInit_v2", func() bool {
		select {
		case err := <-exited:
			ended = true
			t.Logf("the snapshot ended: %v", err)
			return true
		default:
		}
		_, err := os.Stat(entered)
		return err == nil
	})
	if err != nil || ended {
		t.Fatalf("the snapshot did not reach the library (%v), or ended before SIGTERM: %s", err, stderr.String())
	}
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != exitError || !strings.Contains(stderr.String(), "interrupted") {
			t.Errorf("after SIGTERM: %v, stderr %q; want exit 2, interrupted", err, stderr.String())
		}
		t.Logf("ended %s after SIGTERM", time.Since(sent))
	case <-time.After(10 * time.Second):
		t.Fatal("still running 10s after SIGTERM")
	}
}

// TestBaselineWithoutNVMLOnNVIDIAHostWarns: a baseline that could not read
// NVML on a host whose driver is loaded (<proc-root>/driver/nvidia; on the
// live host also /dev/nvidia*) says at once, on stderr, that GPU memory will
// not be compared; with --require-nvml it is an error. A host without the
// driver says nothing.
func TestBaselineWithoutNVMLOnNVIDIAHostWarns(t *testing.T) {
	root := tinyProcRoot(t)
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	flags := []string{"--db", db, "--proc-root", root}
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", "no-driver", "--no-nvml"}, flags...)...); code != 0 || strings.Contains(stderr, "NVML") {
		t.Errorf("baseline on a host without the driver: exit %d, stderr %q", code, stderr)
	}
	if err := os.MkdirAll(filepath.Join(root, "driver", "nvidia", "gpus"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, nvml := range [][]string{{"--no-nvml"}, {}} { // skipped, and a library not found
		code, _, stderr := gpusnap(t, append(append([]string{"baseline", "--tenant", "driver"}, nvml...), flags...)...)
		if code != 0 || !strings.Contains(stderr, "shows an NVIDIA driver: GPU memory will not be compared") ||
			!strings.Contains(stderr, filepath.Join(root, "driver", "nvidia")) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("baseline %v on a host with the driver: exit %d, stderr %q", nvml, code, stderr)
		}
	}
	args := append([]string{"baseline", "--tenant", "driver", "--require-nvml"}, flags...)
	code, stdout, stderr := gpusnap(t, args...)
	oneLine(t, args, code, stdout, stderr, "NVML cannot be read")
}
