package bpf

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/internal/testwait"

	"github.com/gpusnap/gpusnap/internal/testenv"
)

// matrixEnv is set in the kernel matrix's guests (scripts/kernel-matrix.sh),
// where every hook is expected to load: there a refusal fails the test.
const matrixEnv = "GPUSNAP_KERNEL_MATRIX"

// openWatch loads the programs, or skips the test where the kernel refuses
// BPF (fails it, in the kernel matrix).
func openWatch(t *testing.T, hooks ...Hook) *Watch {
	t.Helper()
	testenv.Root(t, "loads the watch programs")
	start := time.Now()
	w, err := Open([]uint32{195}, hooks)
	if err != nil && os.Getenv(matrixEnv) != "" {
		t.Fatalf("matrix: %s refused: %v", hooks[0], err)
	}
	if err != nil {
		t.Skipf("BPF test: the kernel refuses the watch programs here: %v", err)
	}
	t.Logf("hook %s loaded and attached in %s; refused: %v; unattached: %v", w.Hook, time.Since(start), w.Refused, w.Unattached)
	t.Cleanup(func() { w.Close() })
	return w
}

// TestEachHook runs the open and mapping check, then the runs check, with
// each hook alone (one load a hook: a load takes minutes in the kernel
// matrix's emulated guests). Where the kernel refuses one (fentry and LSM on
// some hosts), its test skips and says why.
func TestEachHook(t *testing.T) {
	for _, hook := range Hooks {
		t.Run(string(hook), func(t *testing.T) {
			w := openWatch(t, hook)
			checkOpenMap(t, w)
			checkRuns(t, w, 2) // the open and the mapping of checkOpenMap's node
		})
	}
}

// TestEachHookShortUsers runs processes that each open a node named nvidia0
// read-write, map it shared and exit at once, with each hook alone: every
// one's open, mapping and exit must be reported. 1,000 of them in the kernel
// matrix's guests; 100 on a host, where other tests' device users share the
// ring buffer (watch's own live test runs 200 through the whole pipeline).
func TestEachHookShortUsers(t *testing.T) {
	n := 100
	if os.Getenv(matrixEnv) != "" {
		n = 1000
	}
	for _, hook := range Hooks {
		t.Run(string(hook), func(t *testing.T) { checkShortUsers(t, openWatch(t, hook), n) })
	}
}

func checkShortUsers(t *testing.T, w *Watch, n int) {
	node := fakeNode(t, "nvidia0")
	type seen struct{ open, mmap, exit bool }
	var (
		mu    sync.Mutex
		users = map[uint32]*seen{}
	)
	done := readEach(w, func(e Event) {
		mu.Lock()
		defer mu.Unlock()
		s := users[e.PID]
		if s == nil {
			s = &seen{}
			users[e.PID] = s
		}
		switch e.Kind {
		case KindOpen:
			s.open = s.open || (e.Path == node && e.Flags&unix.O_ACCMODE == unix.O_RDWR)
		case KindMmap:
			s.mmap = s.mmap || e.Prot&unix.PROT_WRITE != 0
		case KindExit:
			s.exit = true
		}
	})
	began := time.Now()
	pids := runDeviceUsers(t, node, n)
	c := 0
	_ = testwait.For(30*time.Second, "every device user fully reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		c = 0
		for _, pid := range pids {
			if s := users[uint32(pid)]; s != nil && s.open && s.mmap && s.exit {
				c++
			}
		}
		return c == len(pids)
	})
	lost, _ := w.Lost()
	t.Logf("matrix: %s caught %d/%d short-lived device users (%s; lost %d)", w.Hook, c, len(pids), time.Since(began).Round(time.Millisecond), lost)
	// On a shared host a flood of other tests' device users can fill the
	// ring buffer: with events lost, who lost them is not known. In a
	// matrix guest nothing else runs.
	if c != len(pids) && (lost == 0 || os.Getenv(matrixEnv) != "") {
		t.Errorf("%s: %d of %d device users fully reported, %d events lost", w.Hook, c, len(pids), lost)
	}
	w.Close()
	<-done
}

// readEach hands each event w reads to each, until Read fails (the watch
// stopped or closed): the channel returned is closed then.
func readEach(w *Watch, each func(Event)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			e, err := w.Read()
			if err != nil {
				return
			}
			each(e)
		}
	}()
	return done
}

// deviceUserBinEnv names a static device user run as `BIN -w NODE`: the
// kernel matrix puts livetest's burst helper in its guests, where a Go
// binary's start-up under emulation costs a hundred times a C one's.
const deviceUserBinEnv = "GPUSNAP_DEVICE_USER_BIN"

// runDeviceUsers runs n device users of node, four at a time (this test
// binary again, as TestMain's device user, or deviceUserBinEnv's), and
// returns their PIDs.
func runDeviceUsers(t *testing.T, node string, n int) []int {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	command := func() *exec.Cmd {
		if bin := os.Getenv(deviceUserBinEnv); bin != "" {
			return exec.Command(bin, "-w", node)
		}
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), deviceUserEnv+"="+node)
		return cmd
	}
	pids := make([]int, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				cmd := command()
				if err := cmd.Start(); err != nil {
					errs <- err
					continue
				}
				pids[i] = cmd.Process.Pid
				if err := cmd.Wait(); err != nil {
					errs <- fmt.Errorf("device user %d: %w", cmd.Process.Pid, err)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return pids
}

// fakeNode makes a character node of /dev/zero's number named name, in a
// directory named dev: a node the watch filter takes for an NVIDIA device.
func fakeNode(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "dev")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := unix.Mknod(p, syscall.S_IFCHR|0o600, int(unix.Mkdev(1, 5))); err != nil {
		t.Fatalf("mknod: %v", err)
	}
	return p
}

// checkOpenMap opens a node named nvidia0 (a character node of /dev/zero's
// number, in a directory named dev), maps it, and expects the open, the
// mapping and nothing of a node of another name.
func checkOpenMap(t *testing.T, w *Watch) {
	node, other := fakeNode(t, "nvidia0"), fakeNode(t, "zero")
	f, err := os.OpenFile(other, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	f, err = os.OpenFile(node, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	unix.Munmap(mem)
	f.Close()

	got := map[Kind]Event{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for len(got) < 2 {
			e, err := w.Read()
			if err != nil {
				return
			}
			if e.PID == uint32(os.Getpid()) && (e.Kind == KindOpen || e.Kind == KindMmap) {
				if strings.Contains(e.Path, "zero") {
					t.Errorf("event for a node not named nvidia: %+v", e)
				}
				got[e.Kind] = e
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		w.Close()
		<-done
		t.Fatalf("events seen: %+v", got)
	}
	open, mmap := got[KindOpen], got[KindMmap]
	if !strings.HasSuffix(open.Path, "/dev/nvidia0") || open.Major != 1 || open.Minor != 5 || !open.Char() {
		t.Errorf("open event: %+v", open)
	}
	if w.Hook == HookTracepoint && (mmap.Length != 4096 || mmap.Prot != unix.PROT_READ) {
		t.Errorf("mmap event: %+v", mmap)
	}
	if lost, err := w.Lost(); err != nil || lost != 0 {
		t.Errorf("lost %d, %v", lost, err)
	}
}

// checkRuns opens a node named nvidia0 2,000 times from this process over
// more than a second, then eight other nodes once each, where the process
// holds taken runs already. The first open of nvidia0 goes out whole, naming
// its run; the rest are counted in it: in run records (a count, the first
// time, no path) at most once a second, and the counts left when the watch
// stops in Counted. They add up to 2,000. Each other node starts a run of
// its own until the process's runs are all taken, and goes out whole in
// none after. It stops the watch.
func checkRuns(t *testing.T, w *Watch, taken int) {
	const opens = 2000
	nodes := []string{fakeNode(t, "nvidia0")}
	for i := range Runs {
		nodes = append(nodes, fakeNode(t, fmt.Sprintf("nvidia%d", i+1)))
	}
	var events []Event
	done := readEach(w, func(e Event) {
		if e.PID == uint32(os.Getpid()) && e.Kind == KindOpen {
			events = append(events, e)
		}
	})
	began := time.Now()
	for i := range opens {
		fd, err := unix.Open(nodes[0], unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		if i%200 == 0 {
			time.Sleep(130 * time.Millisecond) // workload: the opens span more than a second
		}
	}
	for _, node := range nodes[1:] {
		fd, err := unix.Open(node, unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
	}
	took := time.Since(began)
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	<-done
	counted, err := w.Counted()
	if err != nil {
		t.Fatal(err)
	}
	run, whole, inRecords, left, records := uint32(0), map[string]uint32{}, uint64(0), uint64(0), 0
	for _, e := range events {
		if e.Count == 0 {
			if _, dup := whole[e.Path]; dup {
				t.Errorf("a second whole open of %s: %+v", e.Path, e)
			}
			whole[e.Path] = e.Run
			if e.Path == nodes[0] {
				run = e.Run
			}
		}
	}
	for _, e := range events {
		if e.Count > 0 && (e.Run != run || e.Path != "" || e.FirstNS > e.TimeNS) {
			t.Errorf("a run's record: %+v (nvidia0's run %d)", e, run)
		}
		if e.Count > 0 && e.Run == run {
			inRecords += e.Count
			records++
		}
	}
	for _, e := range counted {
		if e.PID == uint32(os.Getpid()) && e.Run == run {
			left += e.Count
		}
	}
	lost, _ := w.Lost()
	t.Logf("matrix: %s counted %d opens of one node in %s: 1 whole, %d in %d records, %d left at the stop; lost %d",
		w.Hook, opens, took.Round(time.Millisecond), inRecords, records, left, lost)
	if run == 0 || 1+inRecords+left != opens || records == 0 || lost != 0 {
		t.Errorf("%s: run %d: 1 + %d + %d opens counted, want %d in all, some in records (lost %d)", w.Hook, run, inRecords, left, opens, lost)
	}
	runs := map[uint32]bool{run: true}
	for i, node := range nodes[1:] {
		r, ok := whole[node]
		free := i < int(Runs)-1-taken
		if !ok || free && (r == 0 || runs[r]) || !free && r != 0 {
			t.Errorf("%s: open of %s: reported %v in run %d (runs taken before it: %v)", w.Hook, node, ok, r, runs)
		}
		runs[r] = true
	}
}
