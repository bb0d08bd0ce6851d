package watch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/bpf"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testwait"
	"github.com/gpusnap/gpusnap/snapshot"
)

// running is a watch started by a test.
type running struct {
	db     string
	start  eventlog.Event
	cancel context.CancelFunc
	done   chan struct{}
	stats  Stats
	err    error
	log    *syncLog
}

// syncLog is the watch's stderr, written while the test reads it.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startWatch runs a watch on the store db until stop; it skips the test
// where BPF is asked for and the kernel refuses it. It shares the quiet
// host, since each test waits for its own device users' events, which
// another package's hopper would crowd out of the ring buffer.
func startWatch(t *testing.T, db string, opts Options) *running {
	t.Helper()
	livetest.Require(t)
	livetest.ShareQuietHost(t)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{db: db, cancel: cancel, done: make(chan struct{}), log: &syncLog{}}
	started := make(chan eventlog.Event, 1)
	opts.DB, opts.NVML.Disabled = db, true
	opts.Started = func(e eventlog.Event) { started <- e }
	opts.Log = r.log
	go func() {
		defer close(r.done)
		r.stats, r.err = Run(ctx, opts)
	}()
	select {
	case r.start = <-started:
		t.Logf("watch: %s", strings.TrimSpace(r.log.String()))
	case <-r.done:
		if opts.Mode == ModeBPF {
			t.Skipf("BPF test: the kernel refuses the watch programs here: %v", r.err)
		}
		t.Fatalf("watch did not start: %v", r.err)
	case <-time.After(2 * time.Minute): // loading BPF is CPU work in the kernel: slow on a loaded host
		cancel()
		t.Fatal("watch did not start in 2 minutes")
	}
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop stops the watch as SIGTERM would, and returns what it did.
func (r *running) stop(t *testing.T) Stats {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("watch did not stop in 30s")
	}
	if r.err != nil {
		t.Fatalf("watch: %v", r.err)
	}
	if t.Failed() {
		t.Logf("watch said: %s", r.log.String())
	}
	return r.stats
}

// waitLogged waits until the events the watch has written, as a reader sees
// them while it runs, satisfy cond. On timeout the test fails naming what,
// and goes on: its own checks then say what is missing.
func (r *running) waitLogged(t *testing.T, what string, cond func([]eventlog.Event) bool) {
	t.Helper()
	err := testwait.For(20*time.Second, what, func() bool {
		res, _ := eventlog.ReadEvents(eventlog.JournalDir(r.db), time.Time{}, time.Time{})
		return cond(res.Events)
	})
	if err != nil {
		t.Error(err)
	}
}

// logged is a condition for waitLogged: each of pids has an event of each
// of kinds in the log (with no kinds, an event of any kind).
func logged(pids []int, kinds ...string) func([]eventlog.Event) bool {
	return func(events []eventlog.Event) bool {
		seen := map[int]map[string]bool{}
		for _, e := range events {
			if e.Process != nil {
				if seen[e.Process.PID] == nil {
					seen[e.Process.PID] = map[string]bool{}
				}
				seen[e.Process.PID][e.Kind] = true
			}
		}
		for _, pid := range pids {
			if seen[pid] == nil {
				return false
			}
			for _, k := range kinds {
				if !seen[pid][k] {
					return false
				}
			}
		}
		return true
	}
}

func readAll(t *testing.T, db string) eventlog.ReadResult {
	t.Helper()
	res, err := eventlog.ReadEvents(eventlog.JournalDir(db), time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Damaged > 0 {
		t.Errorf("%d damaged lines in the event log", res.Damaged)
	}
	return res
}

// byPID groups the events of processes by host PID.
func byPID(events []eventlog.Event) map[int][]eventlog.Event {
	out := map[int][]eventlog.Event{}
	for _, e := range events {
		if e.Process != nil {
			out[e.Process.PID] = append(out[e.Process.PID], e)
		}
	}
	return out
}

// TestLiveBPFCatchesShortWorkers runs 200 workers (the command's live test
// runs 1,000 through diff --tenant) that each open a node
// named nvidia0 read-write, map it shared and exit within a few ms, while
// watch runs with BPF: every one must be in the log with its exec, open,
// mapping and exit, its identity, exe and cgroup, and nothing lost.
func TestLiveBPFCatchesShortWorkers(t *testing.T) {
	loop := livetest.NewLoop(t)
	livetest.ShareQuietHost(t)
	bin := livetest.BuildBurst(t)
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	w := startWatch(t, db, Options{Mode: ModeBPF})
	n := 200
	if testing.Short() {
		n = 50
	}
	began := time.Now()
	pids := livetest.Burst(t, bin, loop.Node, n)
	t.Logf("%d workers ran in %s", len(pids), time.Since(began))
	w.waitLogged(t, "every worker's exec, open, mapping and exit", logged(pids, eventlog.KindExec, eventlog.KindOpen, eventlog.KindMmap, eventlog.KindExit))
	ended := time.Now()
	stats := w.stop(t)
	t.Logf("stats: %+v; mean latency %s", stats, stats.SumLatency/time.Duration(max(stats.Timed, 1)))

	res := readAll(t, db)
	procs := byPID(res.Events)
	missing := 0
	for _, pid := range pids {
		kinds := map[string]eventlog.Event{}
		for _, e := range procs[pid] {
			kinds[e.Kind] = e
		}
		open, mmap, exit, exec := kinds[eventlog.KindOpen], kinds[eventlog.KindMmap], kinds[eventlog.KindExit], kinds[eventlog.KindExec]
		if open.Access != "rw" || mmap.Perms != "rw-s" || exit.Kind == "" || exec.Kind == "" {
			missing++
			if missing <= 3 {
				t.Errorf("pid %d: events %+v", pid, procs[pid])
			}
			continue
		}
		p := open.Process
		if p.StartTime == 0 || p.Exe != bin || p.Cgroup == "" || open.Device.Path != loop.Node || open.Device.Number != loop.DeviceNumber() {
			t.Errorf("pid %d: identity %+v device %+v", pid, p, open.Device)
		}
		if exit.Process.Key() != p.Key() || mmap.Process.Key() != p.Key() {
			t.Errorf("pid %d: the exit or mapping names another process: %s, %s", pid, exit.Process.Key(), mmap.Process.Key())
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d workers not fully recorded", missing, len(pids))
	}
	if stats.Lost != 0 {
		t.Errorf("%d events lost", stats.Lost)
	}
	// The 1 s target is bench/watch.sh's to show on a quiet host; here, beside
	// other packages' tests under -race, the mean must meet it and the slowest
	// event only stay bounded.
	if mean := stats.SumLatency / time.Duration(max(stats.Timed, 1)); mean > time.Second || stats.MaxLatency > 5*time.Second {
		t.Errorf("events reached the log after %s on average, %s at the slowest (limits 1s and 5s)", mean, stats.MaxLatency)
	}
	cov := eventlog.Cover(res, began, ended)
	if !cov.Complete() {
		t.Errorf("coverage: %+v", cov)
	}
}

// TestLiveBPFContainerAttributed runs workers in their own pid and mount
// namespaces with a private /dev, in a docker-named cgroup: each is named by
// its container and its PID inside it.
func TestLiveBPFContainerAttributed(t *testing.T) {
	loop := livetest.NewLoop(t)
	bin := livetest.BuildBurst(t)
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	w := startWatch(t, db, Options{Mode: ModeBPF})
	c, nsPIDs := livetest.BurstInContainer(t, bin, loop, 5)
	w.waitLogged(t, "an open of each container worker", func(events []eventlog.Event) bool {
		n := 0
		for _, e := range events {
			if e.Kind == eventlog.KindOpen && e.Process.ContainerID == c.ID {
				n++
			}
		}
		return n >= len(nsPIDs)
	})
	w.stop(t)
	inside := map[int]bool{}
	for _, p := range nsPIDs {
		inside[p] = true
	}
	found := 0
	for _, e := range readAll(t, db).Events {
		if e.Kind != eventlog.KindOpen || e.Process.ContainerID != c.ID {
			continue
		}
		found++
		if !inside[e.Process.NSPID] || e.Process.PID == e.Process.NSPID || e.Device.Path != "/dev/nvidia0" {
			t.Errorf("container worker: %+v device %+v (PIDs inside: %v)", e.Process, e.Device, nsPIDs)
		}
		if e.Process.Cgroup != c.CgroupPath {
			t.Errorf("cgroup %q, want %q", e.Process.Cgroup, c.CgroupPath)
		}
	}
	if found != len(nsPIDs) {
		t.Errorf("%d opens attributed to container %s, want %d", found, c.ID[:12], len(nsPIDs))
	}
}

// TestLiveWatchRestarted stops the watch mid-window and starts it again:
// the events of both runs are kept and the gap between them is on record.
func TestLiveWatchRestarted(t *testing.T) {
	loop := livetest.NewLoop(t)
	bin := livetest.BuildBurst(t)
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	w := startWatch(t, db, Options{})
	from := time.Now()
	before := livetest.Burst(t, bin, loop.Node, 3)
	w.waitLogged(t, "the workers run before the restart", logged(before))
	w.stop(t)
	missed := livetest.Burst(t, bin, loop.Node, 3)
	w = startWatch(t, db, Options{})
	after := livetest.Burst(t, bin, loop.Node, 3)
	w.waitLogged(t, "the workers run after the restart", logged(after))
	to := time.Now()
	w.stop(t)
	res := readAll(t, db)
	procs := byPID(res.Events)
	for _, pid := range append(before, after...) {
		if len(procs[pid]) == 0 {
			t.Errorf("worker %d, run while a watch ran, is not in the log", pid)
		}
	}
	for _, pid := range missed {
		if len(procs[pid]) != 0 && w.start.Mode != ModeFallback {
			t.Errorf("worker %d ran while no watch ran, yet is in the log", pid)
		}
	}
	cov := eventlog.Cover(res, from, to)
	if len(cov.Gaps) != 1 || cov.Gaps[0].Why != "the watch was stopped" {
		t.Errorf("gaps: %+v", cov.Gaps)
	}
}

// TestLiveFallbackSeesHolder runs the fallback: a process that keeps the
// device open and mapped is recorded by a rescan, and its end by a later one.
func TestLiveFallbackSeesHolder(t *testing.T) {
	if _, err := os.Stat("/proc/self/ns/pid"); err != nil {
		t.Skip("no /proc")
	}
	loop := livetest.NewLoop(t)
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	w := startWatch(t, db, Options{Mode: ModeFallback, Interval: 250 * time.Millisecond})
	if w.start.Mode != ModeFallback || len(w.start.Blind) == 0 {
		t.Errorf("start record: %+v", w.start)
	}
	holder := livetest.Hold(t, loop.Node)
	var using, exit bool
	seen := func(events []eventlog.Event) bool {
		for _, e := range events {
			if e.Process == nil || e.Process.PID != holder.PID || e.Process.StartTime != holder.StartTime {
				continue
			}
			using = using || e.Kind == eventlog.KindUsing && e.Device.Path == loop.Node
			exit = exit || e.Kind == eventlog.KindExit
		}
		return using && exit
	}
	// A loaded host slows the rescans: wait for what they must find.
	w.waitLogged(t, "a rescan to find the holder", func(events []eventlog.Event) bool { seen(events); return using })
	holder.Kill(t)
	w.waitLogged(t, "a rescan to find the holder gone", seen)
	w.stop(t)
	if !using || !exit {
		t.Errorf("holder %d: using %v, exit %v", holder.PID, using, exit)
	}
}

// TestLiveAutoFallsBackSayingWhy: where the hooks asked for do not load,
// auto mode runs the fallback and its start record says why.
func TestLiveAutoFallsBackSayingWhy(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	w := startWatch(t, db, Options{Hooks: []bpf.Hook{bpf.HookLSM}})
	if w.start.Mode != ModeFallback {
		t.Skipf("BPF LSM loads on this kernel (mode %s): nothing falls back", w.start.Mode)
	}
	if !strings.Contains(w.start.Note, "BPF does not load here") || !strings.Contains(w.start.Note, "lsm") {
		t.Errorf("start record: %+v", w.start)
	}
}

// TestLiveBPFForkedChildIsADeviceUser: a tenant opens the node read-write
// and read-only, maps it shared, forks and exits; its child uses the device
// only through what it inherited. The log names the child, by its own
// PID@START, as a user of the device (inherit records, one per way the
// parent used it), so a process that hops PIDs by forking leaves a trail.
func TestLiveBPFForkedChildIsADeviceUser(t *testing.T) {
	loop := livetest.NewLoop(t)
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	w := startWatch(t, db, Options{Mode: ModeBPF})
	sc := livetest.StartGhost(t, loop, livetest.Options{})
	w.waitLogged(t, "the ghost's inherit records of rw, r and rw-s", func(events []eventlog.Event) bool {
		ways := map[string]bool{}
		for _, e := range events {
			if e.Kind == eventlog.KindInherit && e.Process.PID == sc.Ghost.PID {
				ways[e.Access+e.Perms] = true
			}
		}
		return ways["rw"] && ways["r"] && ways["rw-s"]
	})
	w.stop(t)
	got := map[string]bool{}
	for _, e := range readAll(t, db).Events {
		if e.Kind != eventlog.KindInherit || e.Process.PID != sc.Ghost.PID {
			continue
		}
		if e.Process.StartTime != sc.Ghost.StartTime || e.Device == nil || e.Device.Path != loop.Node || !e.UsesDevice() {
			t.Errorf("inherit record: %+v device %+v", e.Process, e.Device)
			continue
		}
		if parent := snapshot.ProcessKey(sc.Tenant.PID, sc.Tenant.StartTime); !strings.Contains(e.Note, parent) {
			t.Errorf("inherit record does not name the parent %s: %q", parent, e.Note)
		}
		got[e.Access+e.Perms] = true
	}
	for _, want := range []string{"rw", "r", "rw-s"} {
		if !got[want] {
			t.Errorf("the child %d has no inherit record of %q (has %v)", sc.Ghost.PID, want, got)
		}
	}
}

// TestLiveTracepointSeesIOUringAndIA32: in tracepoint mode, opens through
// io_uring (inline and in an io-wq worker) and a 32-bit program's open and
// mmap2 are recorded like any other, by the process that made them, and the
// start record no longer lists them among the mode's blind spots.
func TestLiveTracepointSeesIOUringAndIA32(t *testing.T) {
	loop := livetest.NewLoop(t)
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	w := startWatch(t, db, Options{Mode: ModeBPF, Hooks: []bpf.Hook{bpf.HookTracepoint}})
	for _, b := range w.start.Blind {
		if strings.Contains(b, "32-bit") || strings.HasPrefix(b, "opens through io_uring") {
			t.Errorf("blind spot %q: the tracepoint mode sees it now", b)
		}
	}
	uring := livetest.IOUringOpen(t, loop.Node)
	ia32 := livetest.IA32OpenMap(t, loop.Node)
	var procs map[int][]eventlog.Event
	count := func(pid int, kind, access string) int {
		n := 0
		for _, e := range procs[pid] {
			if e.Kind == kind && (e.Access == access || e.Perms == access) && e.Device.Path == loop.Node &&
				e.Device.Number == loop.DeviceNumber() && e.Process.StartTime != 0 {
				n++
			}
		}
		return n
	}
	w.waitLogged(t, "the io_uring and 32-bit processes' opens and mapping", func(events []eventlog.Event) bool {
		procs = byPID(events)
		return count(uring, eventlog.KindOpen, "rw") >= 2 && count(ia32, eventlog.KindOpen, "rw") >= 1 && count(ia32, eventlog.KindMmap, "rw-s") >= 1
	})
	w.stop(t)
	procs = byPID(readAll(t, db).Events)
	if n := count(uring, eventlog.KindOpen, "rw"); n != 2 {
		t.Errorf("io_uring opener %d: %d rw opens recorded, want 2: %+v", uring, n, procs[uring])
	}
	if count(ia32, eventlog.KindOpen, "rw") != 1 || count(ia32, eventlog.KindMmap, "rw-s") != 1 {
		t.Errorf("32-bit process %d: want one rw open and one rw-s mapping: %+v", ia32, procs[ia32])
	}
}
