package bpf

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/internal/testenv"
)

// Output that ends mid-record or claims a path past its end is an error,
// never a read out of bounds; records cut by the end of a read are decoded
// whole from the next.
func TestEachRejectsTruncatedOutput(t *testing.T) {
	size := int(unsafe.Sizeof(FileRecord{}))
	buf := make([]byte, size+8)
	rec := (*FileRecord)(unsafe.Pointer(&buf[0]))
	rec.PathLen = 9 // "/dev/null" padded to 16: 8 bytes short
	copy(buf[size:], "/dev/nul")
	files := func(b []byte) error {
		w := &Walk{files: io.NopCloser(bytes.NewReader(b))}
		return w.EachFile(func(*FileRecord, []byte) { t.Error("a record with a truncated path was decoded") })
	}
	if err := files(buf); err == nil || !strings.Contains(err.Error(), "mid-record") {
		t.Errorf("a truncated path: err %v", err)
	}
	if err := files(buf[:size-1]); err == nil || !strings.Contains(err.Error(), "mid-record") {
		t.Errorf("a truncated record: err %v", err)
	}
	rec.PathLen = 1 << 20
	if err := files(buf); err == nil || !strings.Contains(err.Error(), "past its bounds") {
		t.Errorf("a path longer than PATH_MAX: err %v", err)
	}
}

// A walk's output far larger than its read buffer, read half a buffer at a
// time (records cut anywhere), decodes every record once, in order, each
// mapping with its path where the kernel rendered it only for the first of
// a run.
func TestEachDecodesAcrossReads(t *testing.T) {
	size := int(unsafe.Sizeof(VMARecord{}))
	var out []byte
	const n = 20000 // about 2 MB of records: many read buffers
	for i := range n {
		path := fmt.Sprintf("/dev/nvidia%d", i/3%300)
		if i%3 != 0 {
			// The kernel renders a run of one file's path once.
			path = ""
		}
		rec := make([]byte, size+(len(path)+7)&^7)
		r := (*VMARecord)(unsafe.Pointer(&rec[0]))
		r.Start, r.PathLen = uint64(i), uint32(len(path))
		if path == "" {
			r.RecFlags = recordSamePath
		}
		copy(rec[size:], path)
		out = append(out, rec...)
	}
	if len(out) < 4*readBuf {
		t.Fatalf("%d bytes of records: not more than the read buffer", len(out))
	}
	w := &Walk{vmas: io.NopCloser(iotest.HalfReader(bytes.NewReader(out)))}
	next := 0
	err := w.EachVMA(func(r *VMARecord, path []byte) {
		if int(r.Start) != next || string(path) != fmt.Sprintf("/dev/nvidia%d", next/3%300) {
			t.Fatalf("record %d: start %d, path %q", next, r.Start, path)
		}
		next++
	})
	if err != nil || next != n {
		t.Fatalf("decoded %d of %d records: %v", next, n, err)
	}
}

// The iterators load, pin on a BPF filesystem, and read back from their
// pins; a pin directory anyone but root could write is not trusted.
func TestOpenWalkPins(t *testing.T) {
	testenv.Root(t, "loads the BPF iterators")
	mnt := t.TempDir()
	if err := syscall.Mount("bpf", mnt, "bpf", 0, "mode=0700"); err != nil {
		t.Skipf("cannot mount a BPF filesystem: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	old := PinRoot
	PinRoot = mnt + "/gpusnap"
	t.Cleanup(func() { PinRoot = old })

	first, err := OpenWalk()
	if err == nil {
		first.Close()
	}
	if err != nil {
		t.Skipf("the kernel refuses the capture iterators: %v", err)
	}
	if !strings.Contains(first.How, "loaded") || !strings.Contains(first.How, "pinned in") {
		t.Fatalf("first walk: %q, want loaded and pinned", first.How)
	}
	second, err := OpenWalk()
	if err != nil || !strings.HasPrefix(second.How, "pinned iterators") {
		t.Fatalf("second walk: %v, %q: want it read from the pins", err, second.How)
	}
	defer second.Close()
	self := false
	cmdline, err := os.ReadFile("/proc/self/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if err := second.EachTask(func(r *TaskRecord, exe, cmd []byte) {
		if int(r.Pid) == os.Getpid() {
			// The exe is the kernel's, or left to /proc by the fallback program.
			hasExe := len(exe) > 0 && exe[0] == '/' || len(exe) == 0 && r.RecFlags&RecordExeProc != 0
			self = hasExe && r.RecFlags&RecordCmdline != 0 && string(cmd) == string(cmdline)
		}
	}); err != nil || !self {
		t.Fatalf("the pinned task iterator: err %v, saw this process with its exe and command line %q: %v", err, cmdline, self)
	}

	// A pin directory others can write may hold a program that lies.
	if err := os.Chmod(PinRoot, 0o777); err != nil {
		t.Fatal(err)
	}
	third, err := OpenWalk()
	if err == nil {
		third.Close()
	}
	if err != nil || strings.HasPrefix(third.How, "pinned iterators") {
		t.Fatalf("walk with a world-writable pin root: %v, %q: want the pins refused", err, third.How)
	}
}

// Every program of the task and mapping iterators loads on this kernel or
// says why not, and each that loads reports this process alike: its exe in
// the kernel or marked for /proc, and each of its mappings of /dev/zero,
// 2,000 of them (several read buffers), by the open-coded walk up to its
// bound and then VMAUnwalked, by the task_vma walk all of them, and by the
// _proc_path walks none, but VMAUnwalked for /proc. A kernel that refuses
// every combination is a fact the test records and skips on, but in the
// kernel matrix, whose kernels are known to load them.
func TestWalkVariants(t *testing.T) {
	testenv.Root(t, "loads the BPF iterators")
	zero, err := os.Open("/dev/zero")
	if err != nil {
		t.Fatal(err)
	}
	defer zero.Close()
	const n = 2000
	want := map[uint64]bool{}
	for range n {
		b, err := unix.Mmap(int(zero.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_PRIVATE)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Munmap(b) })
		want[uint64(uintptr(unsafe.Pointer(&b[0])))] = true
	}
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	self := uint32(os.Getpid())
	loaded := 0
	for _, tasks := range TaskPrograms {
		for _, vmas := range VMAPrograms {
			w, err := OpenWalkWith([]string{tasks}, []string{vmas})
			if err != nil {
				t.Logf("%s + %s: refused: %v", tasks, vmas, err)
				continue
			}
			loaded++
			gotExe, flags := "", uint32(0)
			if err := w.EachTask(func(r *TaskRecord, e, _ []byte) {
				if r.Pid == self {
					gotExe, flags = string(e), r.RecFlags
				}
			}); err != nil {
				t.Fatal(err)
			}
			switch {
			case tasks == TaskPrograms[0] && (gotExe != exe || flags&RecordExeProc != 0):
				t.Errorf("%s: exe %q, flags %#x: want %q from the kernel", tasks, gotExe, flags, exe)
			case tasks != TaskPrograms[0] && (gotExe != "" || flags&RecordExeProc == 0):
				t.Errorf("%s: exe %q, flags %#x: want none, marked for /proc", tasks, gotExe, flags)
			}
			seen, unwalked, why := 0, false, uint32(0)
			if err := w.EachVMA(func(r *VMARecord, path []byte) {
				if r.Pid != self {
					return
				}
				if r.Kind == VMAUnwalked {
					unwalked, why = true, why|r.RecFlags
					return
				}
				if want[r.Start] {
					seen++
					if string(path) != "/dev/zero" || r.Tid != self || r.Kind != VMADevice {
						t.Fatalf("%s: mapping %#x: path %q, tid %d, kind %d", vmas, r.Start, path, r.Tid, r.Kind)
					}
				}
			}); err != nil {
				t.Fatal(err)
			}
			w.Close()
			t.Logf("%s + %s: %s; %d of %d mappings, unwalked %v", tasks, vmas, w.How, seen, n, unwalked)
			switch {
			case strings.HasSuffix(vmas, "_proc_path") && (seen != 0 || why != RecordPathProc):
				t.Errorf("%s: %d of %d mappings, unwalked flags %#x: want none, and VMAUnwalked for /proc", vmas, seen, n, why)
			case vmas == "gpusnap_vmas" && (why != RecordTooMany || seen == 0 || seen >= n):
				t.Errorf("%s: %d of %d mappings, unwalked flags %#x: want some, then VMAUnwalked", vmas, seen, n, why)
			case vmas == "gpusnap_vma" && (unwalked || seen != n):
				t.Errorf("%s: %d of %d mappings, unwalked %v: want all", vmas, seen, n, unwalked)
			}
		}
	}
	if loaded == 0 && os.Getenv(matrixEnv) != "" {
		t.Fatal("matrix: capture iterators: refused: no combination of the programs loads")
	}
	if loaded == 0 {
		_, err := OpenWalkWith(TaskPrograms, VMAPrograms)
		t.Skipf("matrix: capture iterators: refused: no combination of the programs loads on this kernel: %v", err)
	}
	w, err := OpenWalkWith(TaskPrograms, VMAPrograms)
	if err != nil {
		t.Fatalf("the programs OpenWalk chooses: %v", err)
	}
	w.Close()
	t.Logf("matrix: capture iterators: load %s", strings.TrimPrefix(w.How, "iterators loaded for this capture, "))
}

// The file iterator marks an io_uring instance (REC_RING, no path): a ring
// this process sets up is written as such, under its fd, and the device
// files this process holds are not.
func TestFilesMarkRing(t *testing.T) {
	testenv.Root(t, "loads the BPF iterators")
	var params [120]byte // struct io_uring_params: zeros ask for the defaults
	ring, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params[0])), 0)
	if errno != 0 {
		t.Skipf("io_uring_setup: %v", errno)
	}
	defer unix.Close(int(ring))
	zero, err := os.Open("/dev/zero")
	if err != nil {
		t.Fatal(err)
	}
	defer zero.Close()
	w, err := OpenWalk()
	if err != nil {
		t.Skipf("the kernel refuses the capture iterators: %v", err)
	}
	defer w.Close()
	self := uint32(os.Getpid())
	var rings, zeros []uint32
	if err := w.EachFile(func(r *FileRecord, path []byte) {
		if r.Pid != self {
			return
		}
		switch {
		case r.RecFlags&RecordRing != 0:
			if len(path) != 0 {
				t.Errorf("ring fd %d: path %q, want none", r.Fd, path)
			}
			rings = append(rings, r.Fd)
		case string(path) == "/dev/zero":
			zeros = append(zeros, r.Fd)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if len(rings) != 1 || rings[0] != uint32(ring) || !slices.Contains(zeros, uint32(zero.Fd())) {
		t.Fatalf("ring records %v, want [%d]; /dev/zero fds %v, want %d among them", rings, ring, zeros, zero.Fd())
	}
}
