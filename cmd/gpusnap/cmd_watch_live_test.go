package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testwait"
	"golang.org/x/sys/unix"
)

// TestLiveWatchTransientTenant is the whole story on this host: a baseline,
// gpusnap watch running, 1,000 tenant workers that each open the GPU node
// read-write, map it shared and exit within a few ms, then diff --tenant,
// list and events while the watch still runs: every worker is a
// transient_gpu_process, high (a writable mapping). SIGTERM (the context)
// stops the watch with exit 0 and its metrics said what it did.
func TestLiveWatchTransientTenant(t *testing.T) {
	livetest.Require(t)
	livetest.ShareQuietHost(t)
	loop := livetest.NewLoop(t)
	bin := livetest.BuildBurst(t)
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	g := []string{"--db", db, "--no-nvml"}
	if code, _, errs := gpusnap(t, append([]string{"baseline", "--tenant", "job-7"}, g...)...); code != 0 {
		t.Fatalf("baseline: %s", errs)
	}

	w := startWatch(t, append(g, "--listen", "127.0.0.1:0")...)
	addr := waitFor(t, &w.stderr, w.done, regexp.MustCompile(`metrics at http://(\S+)/metrics`))

	n := 1000
	if testing.Short() {
		n = 100
	}
	pids := livetest.Burst(t, bin, loop.Node, n)
	// Baseline, diff, list and events while the watch runs.
	if code, _, errs := gpusnap(t, append([]string{"list"}, g...)...); code != 0 {
		t.Errorf("list while watch runs: %s", errs)
	}
	waitEvents(t, db, pids)
	code, out, errs := gpusnap(t, append([]string{"diff", "--tenant", "job-7", "--json"}, g...)...)
	if code != exitFindings {
		t.Fatalf("diff --tenant while watch runs: exit %d: %s", code, errs)
	}
	var r diff.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	transient := map[int]bool{}
	for _, f := range r.Findings {
		if f.Kind == diff.KindTransientGPUProcess && f.Severity == diff.High && f.Device == loop.Node {
			transient[f.Process.PID] = true
		}
	}
	for _, pid := range pids {
		if !transient[pid] {
			t.Errorf("worker %d is not reported as a transient_gpu_process", pid)
		}
	}
	t.Logf("%d of %d workers reported as transient_gpu_process; notes %q", len(transient), len(pids), r.Notes)
	if code, _, errs := gpusnap(t, append([]string{"baseline", "--tenant", "job-8"}, g...)...); code != 0 {
		t.Errorf("baseline while watch runs: %s", errs)
	}
	code, out, errs = gpusnap(t, append([]string{"events", "--tenant", "job-7", "--json"}, g...)...)
	var events []eventlog.Event
	if code != 0 || json.Unmarshal([]byte(out), &events) != nil || len(events) < 3*n {
		t.Errorf("events --tenant: exit %d, %d events, %s", code, len(events), errs)
	}

	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`gpusnap_watch_mode{mode="`, "gpusnap_watch_lost_events_total 0",
		"gpusnap_watch_last_flush_timestamp_seconds "} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("metrics lack %q:\n%s", want, metrics)
		}
	}
	if m := regexp.MustCompile(`gpusnap_watch_events_total\{kind="mmap"\} (\d+)`).FindSubmatch(metrics); m == nil || atoi(string(m[1])) < n {
		t.Errorf("mmap events counted: %s", m)
	}
	if bytes.Contains(metrics, []byte("pid=")) || bytes.Contains(metrics, []byte("exe=")) {
		t.Error("metrics carry a PID or exe label")
	}
	livetest.PromtoolCheck(t, metrics)

	if code := w.stop(t); code != 0 || !strings.Contains(w.stderr.String(), "stopped:") {
		t.Errorf("watch stopped with exit %d: %s", code, w.stderr.String())
	}
}

// liveWatch is gpusnap watch run in-process in its BPF mode until stopped.
type liveWatch struct {
	cancel  context.CancelFunc
	done    chan int
	stderr  livetest.LockedBuffer
	stopped *int // the exit status, once stopped
}

// startWatch starts gpusnap watch --mode bpf with args and waits until it
// records; Cleanup stops it. It shares the quiet host, since every test of
// a live watch counts on the events of its own device users, which another
// package's hopper would crowd out of the ring buffer.
func startWatch(t *testing.T, args ...string) *liveWatch {
	t.Helper()
	livetest.ShareQuietHost(t)
	ctx, cancel := context.WithCancel(context.Background())
	w := &liveWatch{cancel: cancel, done: make(chan int, 1)}
	go func() {
		w.done <- run(ctx, append([]string{"gpusnap", "watch", "--mode", "bpf"}, args...), io.Discard, &w.stderr)
	}()
	t.Cleanup(func() { w.stop(t) })
	waitFor(t, &w.stderr, w.done, regexp.MustCompile(`recording into .* in (\S+) mode`))
	return w
}

// stop stops the watch (SIGTERM, as the context) and returns its exit
// status, the same on every call.
func (w *liveWatch) stop(t *testing.T) int {
	t.Helper()
	if w.stopped != nil {
		return *w.stopped
	}
	w.cancel()
	select {
	case code := <-w.done:
		w.stopped = &code
		return code
	case <-time.After(30 * time.Second):
		t.Fatal("watch did not stop")
	}
	return -1
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// waitFor waits for the watch's stderr to match re and returns the first group.
func waitFor(t *testing.T, stderr *livetest.LockedBuffer, done chan int, re *regexp.Regexp) string {
	t.Helper()
	var m []string
	exited := false
	var code int
	// Two minutes: loading BPF is slow on a loaded host.
	err := testwait.For(2*time.Minute, "the watch to say "+re.String(), func() bool {
		if m = re.FindStringSubmatch(stderr.String()); m != nil {
			return true
		}
		select {
		case code = <-done:
			exited = true
		default:
		}
		return exited
	})
	switch {
	case m != nil:
		return m[1]
	case exited && strings.Contains(stderr.String(), "no BPF hook loads"):
		t.Skipf("BPF test: the kernel refuses the watch programs here: %s", stderr.String())
	case exited:
		t.Fatalf("watch exited %d: %s", code, stderr.String())
	}
	t.Fatalf("%v: %s", err, stderr.String())
	return ""
}

// waitEvents waits until the log holds the exit of every one of pids. It is
// a wait, not a bound: 1,000 exits land within a few seconds on an idle host,
// and a host running other tests at load 15 once took more than 10 s.
func waitEvents(t *testing.T, db string, pids []int) {
	t.Helper()
	var err error
	if waited := testwait.For(60*time.Second, "the exit of every worker in the log", func() bool {
		var res eventlog.ReadResult
		res, err = eventlog.ReadEvents(eventlog.JournalDir(db), time.Time{}, time.Time{})
		exited := map[int]bool{}
		for _, e := range res.Events {
			if e.Kind == eventlog.KindExit {
				exited[e.Process.PID] = true
			}
		}
		all := err == nil
		for _, p := range pids {
			all = all && exited[p]
		}
		return all
	}); waited != nil {
		t.Fatalf("%v (last read: %v)", waited, err)
	}
}

// TestLiveGateLingererUnderWatch: with gpusnap watch recording, a poller
// (a root shell) runs a holder that maps the job's GPU rw-s. The holder
// lets go of the GPU (it exits) before the prolog's gate, baseline --gpus,
// runs, as a squatter that sees gpusnap start does. The gate fails on the
// holder the log saw, gone now while its parent of the same uid lives, and
// names it. Once the poller has gone too, nothing of the holder's kin can
// take the GPU again, and the same gate is clean.
func TestLiveGateLingererUnderWatch(t *testing.T) {
	livetest.Require(t, "gcc")
	// Its gate judges the whole host and its watch's window, which another
	// package's hidden process or hopper would fail. The quiet host is shared
	// before the fake GPUs are owned, in the order every test takes them.
	livetest.ShareQuietHost(t)
	livetest.OwnFakeGPUs(t)
	loop := livetest.NewLoop(t)
	// The GPU is a node outside /tmp: other packages' live tests map
	// theirs, named nvidia0 too, under /tmp (and in containers' /dev), and
	// the allow list takes those out of this test's verdicts.
	dir, err := os.MkdirTemp("/run", "gpusnap-lingerer-")
	if err != nil {
		t.Skipf("cannot make the test's directory under /run: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	node := filepath.Join(dir, "dev", "nvidia0")
	if err := os.MkdirAll(filepath.Dir(node), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(node, syscall.S_IFBLK|0o600, int(unix.Mkdev(loop.Major, loop.Minor))); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "gpusnap.db")
	g := []string{"--db", db, "--no-nvml"}
	// Without NVML a GPU is seen by its users: an allowed daemon holds it.
	livetest.HoldAt(t, filepath.Join(dir, "daemon", "nvidia-persistenced"), node)
	allow := filepath.Join(dir, "allow")
	if err := os.WriteFile(allow, []byte("exe=/tmp/*\ndevice=/tmp/*\ndevice=/dev/nvidia*\nexe=/var/lib/gpusnap-*\nexe=/dev/shm/*\n"+
		"kind=hidden_process\nkind=unreadable_process\nexe="+dir+"/daemon/*\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	startWatch(t, g...)

	// The poller runs the holder and goes on polling once it is gone.
	tenant := livetest.CopyExe(t, livetest.TenantBinary(t), filepath.Join(dir, "bin", "squat"))
	pidfile := filepath.Join(dir, "pids")
	poller := exec.Command("/bin/sh", "-c", `"$0" "$1" "$2" & while sleep 1; do :; done`, tenant, node, pidfile)
	if err := poller.Start(); err != nil {
		t.Fatal(err)
	}
	polled := make(chan error, 1)
	go func() { polled <- poller.Wait() }()
	t.Cleanup(func() {
		poller.Process.Kill()
		<-polled
	})
	var holder, nspid int
	var start uint64
	if err := testwait.For(30*time.Second, "the holder's PID file", func() bool {
		b, err := os.ReadFile(pidfile)
		if err != nil {
			return false
		}
		_, err = fmt.Sscanf(string(b), "tenant %d %d %d", &holder, &nspid, &start)
		return err == nil
	}); err != nil {
		t.Fatal(err)
	}
	livetest.WaitMapped(t, holder, "rw-s", node)
	if err := syscall.Kill(holder, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitEvents(t, db, []int{holder})

	gate := func(tenant string) (int, *diff.Result, string) {
		t.Helper()
		code, out, errs := gpusnap(t, append([]string{"baseline", "--tenant", tenant, "--gpus", "0", "--allow", allow, "--json"}, g...)...)
		var snap struct {
			Check *diff.Result `json:"check"`
		}
		if err := json.Unmarshal([]byte(out), &snap); err != nil || snap.Check == nil {
			t.Fatalf("baseline --gpus 0 of %s: exit %d, %v: %s", tenant, code, err, errs)
		}
		for _, f := range snap.Check.Findings {
			errs += "\n" + f.Kind + " " + f.Severity.String() + ": " + f.Summary
		}
		return code, snap.Check, errs
	}
	code, r, errs := gate("job-1")
	named := false
	for _, f := range r.Findings {
		if f.Kind == diff.KindTransientGPUProcess && f.Severity == diff.High && f.Process != nil &&
			f.Process.PID == holder && f.Process.StartTime == start && strings.Contains(f.Summary, "its parent") {
			named = true
		}
	}
	if code != exitFindings || !named {
		t.Fatalf("gate with the holder %d@%d gone and its poller %d alive: exit %d, holder named %v, want exit %d naming it\n%s",
			holder, start, poller.Process.Pid, code, named, exitFindings, errs)
	}

	// The poller gone as well: no kin of the holder runs, and the GPU is clean.
	if err := poller.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	polled <- <-polled
	if code, _, errs := gate("job-2"); code != exitClean {
		t.Errorf("gate with the holder and its poller gone: exit %d, want %d\n%s", code, exitClean, errs)
	}
}
