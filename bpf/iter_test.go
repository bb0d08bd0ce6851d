package bpf

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// Output that ends mid-record or claims a path past its end is an error,
// never a read out of bounds.
func TestEachRejectsTruncatedOutput(t *testing.T) {
	size := int(unsafe.Sizeof(FileRecord{}))
	buf := make([]byte, size+8)
	rec := (*FileRecord)(unsafe.Pointer(&buf[0]))
	rec.PathLen = 9 // "/dev/null" padded to 16: 8 bytes short
	copy(buf[size:], "/dev/nul")
	w := &Walk{Files: buf}
	if err := w.EachFile(func(*FileRecord, []byte) { t.Error("a record with a truncated path was decoded") }); err == nil {
		t.Error("a truncated path: no error")
	}
	w.Files = buf[:size-1]
	if err := w.EachFile(func(*FileRecord, []byte) {}); err == nil || !strings.Contains(err.Error(), "mid-record") {
		t.Errorf("a truncated record: err %v", err)
	}
	rec.PathLen = 1 << 20
	w.Files = buf
	if err := w.EachFile(func(*FileRecord, []byte) {}); err == nil {
		t.Error("a path longer than PATH_MAX: no error")
	}
}

// The iterators load, pin on a BPF filesystem, and read back from their
// pins; a pin directory anyone but root could write is not trusted.
func TestWalkHostPins(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("BPF iterators need root")
	}
	mnt := t.TempDir()
	if err := syscall.Mount("bpf", mnt, "bpf", 0, "mode=0700"); err != nil {
		t.Skipf("cannot mount a BPF filesystem: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	old := PinRoot
	PinRoot = mnt + "/gpusnap"
	t.Cleanup(func() { PinRoot = old })

	first, err := WalkHost()
	if err != nil {
		t.Skipf("the kernel refuses the capture iterators: %v", err)
	}
	if !strings.Contains(first.How, "loaded") || !strings.Contains(first.How, "pinned in") {
		t.Fatalf("first walk: %q, want loaded and pinned", first.How)
	}
	second, err := WalkHost()
	if err != nil || !strings.HasPrefix(second.How, "pinned iterators") {
		t.Fatalf("second walk: %v, %q: want it read from the pins", err, second.How)
	}
	self := false
	if err := second.EachTask(func(r *TaskRecord, exe []byte) {
		if int(r.Pid) == os.Getpid() {
			self = len(exe) > 0 && exe[0] == '/'
		}
	}); err != nil || !self {
		t.Fatalf("the pinned task iterator: err %v, saw this process with its exe: %v", err, self)
	}

	// A pin directory others can write may hold a program that lies.
	if err := os.Chmod(PinRoot, 0o777); err != nil {
		t.Fatal(err)
	}
	third, err := WalkHost()
	if err != nil || strings.HasPrefix(third.How, "pinned iterators") {
		t.Fatalf("walk with a world-writable pin root: %v, %q: want the pins refused", err, third.How)
	}
}
