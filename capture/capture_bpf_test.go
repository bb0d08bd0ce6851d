package capture_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/bpf"
	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testenv"
	"github.com/gpusnap/gpusnap/internal/testwait"
	"github.com/gpusnap/gpusnap/snapshot"
)

// capturePath captures this host's /proc by one path, without NVML.
func capturePath(t *testing.T, path string) *snapshot.Snapshot {
	t.Helper()
	if path == capture.PathBPF {
		testenv.Root(t, "the BPF capture path loads programs")
	}
	snap, err := capture.Capture(context.Background(), capture.Options{Path: path})
	if err != nil {
		if path == capture.PathBPF {
			t.Skipf("the kernel refuses the BPF capture path: %v", err)
		}
		t.Fatalf("Capture (%s): %v", path, err)
	}
	if got := snap.Scan.CapturePath; got != path {
		t.Fatalf("Capture asked for %s took %q (%s)", path, got, snap.Scan.CaptureNote)
	}
	return snap
}

// The differential test of the two capture paths: on a live host with a
// ghost, a ghost in a container's pid namespace and processes starting and
// exiting throughout, the BPF and /proc captures agree on every device
// mapping and holder of every process present in both, and on the whole of
// each ghost. The /proc capture is taken between two BPF captures: a process
// the two BPF captures saw alike held still meanwhile, so the /proc capture
// must see it so too (other tests' processes run on this host as well).
func TestBPFAndProcAgree(t *testing.T) { bpfAndProcAgree(t) }

// The same, with the fallback programs of older kernels (c/iter.c): the
// exe read from /proc, the mappings walked one task_vma call each (or,
// where this kernel will not name a mapped file, with the files left to
// /proc too).
func TestBPFFallbacksAndProcAgree(t *testing.T) {
	fallbackAndProcAgree(t, []string{"gpusnap_vma", "gpusnap_vma_proc_path"})
}

// The same, with the walks that leave every process mapping a file to
// /proc: the only ones some 6.18 builds load, run on every kernel.
func TestBPFProcPathAndProcAgree(t *testing.T) {
	fallbackAndProcAgree(t, []string{"gpusnap_vmas_proc_path", "gpusnap_vma_proc_path"})
}

// fallbackAndProcAgree runs the differential test with the exe from /proc
// and the first of vmas the kernel takes, which the capture note must name.
func fallbackAndProcAgree(t *testing.T, vmas []string) {
	defer capture.UseWalkPrograms(bpf.TaskPrograms[1:], vmas)()
	note := capturePath(t, capture.PathBPF).Scan.CaptureNote
	if !strings.Contains(note, "gpusnap_tasks_proc_exe") || !slices.ContainsFunc(vmas, func(name string) bool {
		return strings.Contains(note, ", "+name+",") || strings.Contains(note, ", "+name+" (refused")
	}) {
		t.Fatalf("capture note %q: want gpusnap_tasks_proc_exe and one of %v", note, vmas)
	}
	bpfAndProcAgree(t)
}

func bpfAndProcAgree(t *testing.T) {
	livetest.Require(t, "losetup", "unshare", "gcc")
	plain := livetest.StartGhost(t, livetest.NewLoop(t), livetest.Options{})
	boxed := livetest.StartGhost(t, livetest.NewLoop(t), livetest.Options{Container: true})

	// Churn: short-lived processes throughout the captures.
	stop, churning := make(chan struct{}), make(chan struct{})
	var churn sync.WaitGroup
	churn.Go(func() {
		for first := true; ; first = false {
			select {
			case <-stop:
				return
			default:
			}
			_ = exec.Command("sh", "-c", "true & true & wait").Run()
			if first {
				close(churning)
			}
		}
	})
	// A foreign process can change and change back between the captures
	// (a test's driver opening /dev/null for an instant); one the first and
	// last captures agree on is compared, and a disagreement counts only when
	// a second round of captures shows it again.
	var r1 stillRound
	func() {
		defer func() { close(stop); churn.Wait() }()
		<-churning
		r1 = compareStill(t, nil)
	}()
	both, devices, before, procSnap := r1.both, r1.devices, r1.before, r1.proc
	if len(r1.disagree) > 0 {
		r2 := compareStill(t, r1.disagree)
		for key, why := range r1.disagree {
			if again, ok := r2.disagree[key]; ok {
				t.Errorf("%s, in two rounds of captures:\n%s\n%s", key, why, again)
			}
		}
	}
	if both < 10 || devices == 0 {
		t.Fatalf("only %d processes held still in all three captures, %d device entries: nothing was compared", both, devices)
	}
	for _, g := range []*livetest.Scenario{plain, boxed} {
		b, p := findProc(before, g.Ghost), findProc(procSnap, g.Ghost)
		if b == nil || p == nil {
			t.Fatalf("ghost %d: bpf %v, proc %v", g.Ghost.PID, b != nil, p != nil)
		}
		// A sleeping ghost changes nothing but its status counters.
		b.Raw.Status, p.Raw.Status = "", ""
		if !reflect.DeepEqual(b, p) {
			t.Errorf("ghost %d:\n bpf  %+v\n proc %+v", g.Ghost.PID, *b, *p)
		}
		if !b.UsesNVIDIA() || len(b.Holders) < 2 {
			t.Errorf("ghost %d: the BPF path missed its mapping or fds: %+v", g.Ghost.PID, *b)
		}
	}
	if b := findProc(before, boxed.Ghost); b != nil && (len(b.NSpid) != 2 || b.ContainerID != boxed.Container.ID) {
		t.Errorf("container ghost: NSpid %v container %q, want 2 levels and %s", b.NSpid, b.ContainerID, boxed.Container.ID)
	}
	if findProc(before, livetest.Proc{PID: 1, StartTime: procs1(procSnap)}) == nil {
		t.Error("the BPF capture lacks PID 1 (the task iterator skips it; /proc must fill it in)")
	}
	t.Logf("%d processes held still through three captures, %d device mappings and holders compared", both, devices)
}

// stillRound is one round of bpfAndProcAgree's captures: the BPF path, the
// /proc path, the BPF path again.
type stillRound struct {
	before, proc *snapshot.Snapshot
	both         int               // processes unchanged from the first capture to the last
	devices      int               // their mappings and holders
	disagree     map[string]string // by PID@START: how the two paths read it differently
}

// compareStill takes a round of captures and compares, for each process
// the two BPF captures read alike (of only, when only is not nil), the
// /proc capture's reading of it with the BPF path's.
func compareStill(t *testing.T, only map[string]string) stillRound {
	r := stillRound{disagree: map[string]string{}}
	r.before = capturePath(t, capture.PathBPF)
	r.proc = capturePath(t, capture.PathProc)
	after := capturePath(t, capture.PathBPF)
	byKey := func(s *snapshot.Snapshot) map[string]*snapshot.Process {
		m := map[string]*snapshot.Process{}
		for i := range s.Processes {
			m[s.Processes[i].Key()] = &s.Processes[i]
		}
		return m
	}
	procs, afters := byKey(r.proc), byKey(after)
	for i := range r.before.Processes {
		b := &r.before.Processes[i]
		p, a := procs[b.Key()], afters[b.Key()]
		if _, asked := only[b.Key()]; only != nil && !asked {
			continue
		}
		if p == nil || a == nil || b.PID == os.Getpid() {
			continue // this test's own fds move: its churn opens /dev/null
		}
		if b.Defunct() || p.Defunct() || a.Defunct() || (!b.KernelThread && b.Exe == "" && len(b.Cmdline) == 0) {
			// Exiting (another test's tenant, killed): its cgroup and files
			// are torn down while the captures read them.
			continue
		}
		if !reflect.DeepEqual(b.Mappings, a.Mappings) || !reflect.DeepEqual(b.Holders, a.Holders) ||
			!reflect.DeepEqual(identity(b), identity(a)) {
			continue // it changed during the captures
		}
		r.both++
		r.devices += len(b.Mappings) + len(b.Holders)
		var why []string
		if !reflect.DeepEqual(b.Mappings, p.Mappings) {
			why = append(why, fmt.Sprintf("pid %d (%s) mappings:\n bpf  %+v\n proc %+v", b.PID, b.Comm, b.Mappings, p.Mappings))
		}
		if !reflect.DeepEqual(b.Holders, p.Holders) {
			why = append(why, fmt.Sprintf("pid %d (%s) holders:\n bpf  %+v\n proc %+v", b.PID, b.Comm, b.Holders, p.Holders))
		}
		if bi, pi := identity(b), identity(p); !reflect.DeepEqual(bi, pi) {
			why = append(why, fmt.Sprintf("pid %d identity:\n bpf  %+v\n proc %+v", b.PID, bi, pi))
		}
		if len(why) > 0 {
			r.disagree[b.Key()] = strings.Join(why, "\n")
		}
	}
	return r
}

// procs1 is the start time of PID 1 in s.
func procs1(s *snapshot.Snapshot) uint64 {
	for _, p := range s.Processes {
		if p.PID == 1 {
			return p.StartTime
		}
	}
	return 0
}

// identity is what names a process, less the fields that change by
// themselves (state, threads, raw status counters).
func identity(p *snapshot.Process) snapshot.Process {
	q := *p
	q.State, q.Threads, q.Mappings, q.Holders, q.Raw, q.SuspectAnon = "", 0, nil, nil, nil, nil
	if q.KernelThread {
		// A workqueue worker's name ends in the queue it last ran or runs
		// this instant ("kworker/1:1-events", "kworker/u8:0+events_unbound"),
		// which changes from one read to the next and only /proc shows.
		if i := strings.IndexAny(q.Comm, "+-"); i >= 0 {
			q.Comm = q.Comm[:i]
		}
	}
	// The /proc path cannot read every file of every process (PID 1 refuses
	// some even to root); the BPF path reads them in the kernel.
	var errs []string
	for _, e := range q.Errors {
		if !strings.Contains(e, "permission denied") {
			errs = append(errs, e)
		}
	}
	q.Errors = errs
	return q
}

// leaderExited is a C program whose main thread exits (pthread_exit) while
// another thread keeps running with an fd on /dev/null: /proc/PID is then a
// zombie leader with no mm and no fd table of its own.
const leaderExited = `#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static void *run(void *a) { (void)a; for (;;) pause(); return 0; }
int main(void) {
	int fd = open("/dev/null", O_RDWR);
	pthread_t t;
	if (fd < 0 || pthread_create(&t, 0, run, 0)) return 1;
	printf("%d\n", getpid());
	fflush(stdout);
	pthread_exit(0);
}
`

// The BPF path reads a process whose leader thread has exited through a live
// thread: its fds, command line and exe, where /proc/PID shows none.
func TestBPFReadsThroughALiveThread(t *testing.T) {
	livetest.Require(t, "gcc")
	dir := t.TempDir()
	src, bin := dir+"/leader.c", dir+"/leader-exited"
	if err := os.WriteFile(src, []byte(leaderExited), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O1", "-pthread", "-o", bin, src).CombinedOutput(); err != nil {
		t.Skipf("gcc: %v: %s", err, out)
	}
	pid := startReady(t, exec.Command(bin, "--marker"))
	testwait.Until(t, 20*time.Second, fmt.Sprintf("pid %d's leader to exit", pid), func() bool {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		return err == nil && strings.Contains(string(stat), ") Z ")
	})
	snap := capturePath(t, capture.PathBPF)
	for _, p := range snap.Processes {
		if p.PID != pid {
			continue
		}
		if p.State != "Z" || p.Threads != 2 || p.Defunct() {
			t.Errorf("state %q, %d threads: want a live process with a zombie leader", p.State, p.Threads)
		}
		held := false
		for _, h := range p.Holders {
			held = held || h.Target == "/dev/null" && h.DeviceNumber.String() == "1:3"
		}
		if !held || p.Exe != bin || len(p.Cmdline) != 2 || p.Cmdline[1] != "--marker" {
			t.Errorf("read through its live thread: holders %+v, exe %q, cmdline %q; want /dev/null held, %s, --marker", p.Holders, p.Exe, p.Cmdline, bin)
		}
		return
	}
	t.Fatalf("pid %d is not in the BPF capture", pid)
}

// argvTitle is a C program that prints its PID and sleeps; with "title" as
// its first argument it first overwrites its arguments with one string and
// no final NUL, as setproctitle does, which /proc/PID/cmdline reads on
// into the environment.
const argvTitle = `#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
	if (argc > 1 && !strcmp(argv[1], "title")) {
		char *end = argv[argc - 1] + strlen(argv[argc - 1]);
		memset(argv[0], 'T', end - argv[0] + 1);
	}
	printf("%d\n", getpid());
	fflush(stdout);
	for (;;) pause();
}`

// The BPF path copies a command line in the kernel where it is short and
// ends in a NUL, and leaves the rest to /proc: either way its processes'
// command lines are those the /proc path reads, byte for byte.
func TestBPFCommandLines(t *testing.T) {
	livetest.Require(t, "gcc")
	dir := t.TempDir()
	src, bin := dir+"/title.c", dir+"/title"
	if err := os.WriteFile(src, []byte(argvTitle), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O1", "-o", bin, src).CombinedOutput(); err != nil {
		t.Skipf("gcc: %v: %s", err, out)
	}
	long := strings.Repeat("L", 5000) // past what the kernel side copies
	cases := map[string][]string{
		"short":        {"a b", "", "c"},
		"long":         {"x", long},
		"setproctitle": {"title", "a", "b"},
	}
	pids := map[int]string{}
	for name, args := range cases {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"GPUSNAP_TEST_ENV=1"}
		pids[startReady(t, cmd)] = name
	}
	bpfSnap, procSnap := capturePath(t, capture.PathBPF), capturePath(t, capture.PathProc)
	for pid, name := range pids {
		var b, p *snapshot.Process
		for i := range bpfSnap.Processes {
			if bpfSnap.Processes[i].PID == pid {
				b = &bpfSnap.Processes[i]
			}
		}
		for i := range procSnap.Processes {
			if procSnap.Processes[i].PID == pid {
				p = &procSnap.Processes[i]
			}
		}
		if b == nil || p == nil {
			t.Fatalf("%s (pid %d): in the BPF capture %v, in the /proc capture %v", name, pid, b != nil, p != nil)
		}
		if !reflect.DeepEqual(b.Cmdline, p.Cmdline) || !reflect.DeepEqual(b.CmdlineCut, p.CmdlineCut) {
			t.Errorf("%s: BPF path %q, /proc path %q", name, b.Cmdline, p.Cmdline)
		}
		if want := append([]string{bin}, cases[name]...); name != "setproctitle" && !reflect.DeepEqual(b.Cmdline, want) {
			t.Errorf("%s: command line %q, want %q", name, b.Cmdline, want)
		}
	}
}

// startReady starts cmd, waits for the first bytes it writes to stdout (it
// is ready), and returns its PID; Cleanup kills it.
func startReady(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	buf := make([]byte, 32)
	if _, err := out.Read(buf); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}
