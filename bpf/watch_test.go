package bpf

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openWatch loads the programs, or skips the test where the kernel refuses BPF.
func openWatch(t *testing.T, hooks ...Hook) *Watch {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("BPF test: needs root (run the tests as root, as .ci/run does)")
	}
	start := time.Now()
	w, err := Open([]uint32{195}, hooks)
	if err != nil {
		t.Skipf("BPF test: the kernel refuses the watch programs here: %v", err)
	}
	t.Logf("hook %s loaded and attached in %s; refused: %v; unattached: %v", w.Hook, time.Since(start), w.Refused, w.Unattached)
	t.Cleanup(func() { w.Close() })
	return w
}

// TestEachHook runs the open and mapping check with each hook alone: where
// the kernel refuses one (fentry and LSM on some hosts), its test skips and
// says why.
func TestEachHook(t *testing.T) {
	for _, hook := range Hooks {
		t.Run(string(hook), func(t *testing.T) { checkOpenMap(t, openWatch(t, hook)) })
	}
}

// checkOpenMap opens a node named nvidia0 (a character node of /dev/zero's
// number, in a directory named dev), maps it, and expects the open, the
// mapping and nothing of a node of another name.
func checkOpenMap(t *testing.T, w *Watch) {
	dir := filepath.Join(t.TempDir(), "dev")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	node, other := filepath.Join(dir, "nvidia0"), filepath.Join(dir, "zero")
	for _, p := range []string{node, other} {
		if err := unix.Mknod(p, syscall.S_IFCHR|0o600, int(unix.Mkdev(1, 5))); err != nil {
			t.Skipf("mknod refused: %v", err)
		}
	}
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
