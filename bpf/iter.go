package bpf

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// The records the capture iterators write (c/iter.c), as bpf2go laid them out.
type (
	TaskRecord = iterTaskRec
	VMARecord  = iterVmaRec
	FileRecord = iterFileRec
)

// Flags of a record (rec_flags in c/iter.c).
const (
	RecordPathError = 1 // d_path failed: the record has no path
	RecordNSpidDeep = 2 // more pid namespace levels than TaskRecord.Nspid holds
)

// Kinds of a VMARecord.
const (
	VMADevice   = 1 // a device node
	VMADMABuf   = 2 // a DMA-buf; its path is /dmabuf:NAME
	VMAAnonExec = 3 // anonymous executable, 64 MiB or more; its path is the anon_vma_name, if any
)

// Walk is the output of one pass of the capture iterators: records, each a
// header then its path padded to 8 bytes. How says how the iterators ran.
type Walk struct {
	Tasks, VMAs, Files []byte
	How                string
}

// PinRoot is where WalkHost pins the iterators on a mounted BPF filesystem
// (systemd mounts one at /sys/fs/bpf): pinned, a later capture reads them as
// files and spares the kernel's BTF parse and verification of a load, which
// cost far more than the walk. A directory per build of the programs (named
// by their hash) keeps a newer gpusnap from reading an older one's records.
var PinRoot = "/sys/fs/bpf/gpusnap"

// iterNames are the pinned iterators' file names, in Walk's order.
var iterNames = [3]string{"tasks", "vmas", "files"}

// WalkHost runs each capture iterator once over the caller's pid namespace:
// from their pins under PinRoot where a trusted pin directory holds them,
// else loaded now (and pinned, where PinRoot's parent is a BPF filesystem).
// Its error says why the kernel refused (no CAP_BPF and CAP_PERFMON, no BTF,
// a kernel without iterators).
func WalkHost() (*Walk, error) {
	dir := pinDir()
	if w, err := readPinned(dir); err == nil {
		w.How = "pinned iterators in " + dir
		return w, nil
	}
	var objs iterObjects
	if err := loadIterObjects(&objs, nil); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			// The verifier's log is long; its cause says what it refused.
			return nil, fmt.Errorf("load iterators: %v", verr.Cause)
		}
		return nil, fmt.Errorf("load iterators: %w", err)
	}
	defer objs.Close()
	w := &Walk{How: "iterators loaded for this capture"}
	outs := [3]*[]byte{&w.Tasks, &w.VMAs, &w.Files}
	var links [3]*link.Iter
	for i, prog := range []*ebpf.Program{objs.GpusnapTasks, objs.GpusnapVmas, objs.GpusnapFiles} {
		l, err := link.AttachIter(link.IterOptions{Program: prog})
		if err != nil {
			return nil, fmt.Errorf("%s iterator: %w", iterNames[i], err)
		}
		defer l.Close()
		links[i] = l
		r, err := l.Open()
		if err != nil {
			return nil, fmt.Errorf("%s iterator: %w", iterNames[i], err)
		}
		*outs[i], err = readAll(r, sizeHints[i])
		r.Close()
		if err != nil {
			return nil, fmt.Errorf("%s iterator: %w", iterNames[i], err)
		}
	}
	if err := pin(dir, links); err == nil {
		w.How += ", pinned in " + dir
	}
	return w, nil
}

// sizeHints are first buffer sizes for the iterators' output.
var sizeHints = [3]int{256 << 10, 16 << 10, 64 << 10}

func pinDir() string {
	sum := sha256.Sum256(_IterBytes)
	return PinRoot + "/capture-" + hex.EncodeToString(sum[:8])
}

// readPinned reads the iterators pinned in dir. It trusts only a directory
// on a BPF filesystem that root owns and only root can write: anyone who can
// write there could pin a program that lies.
func readPinned(dir string) (*Walk, error) {
	if err := trustedDir(dir); err != nil {
		return nil, err
	}
	w := &Walk{}
	outs := [3]*[]byte{&w.Tasks, &w.VMAs, &w.Files}
	for i, name := range iterNames {
		f, err := os.Open(dir + "/" + name)
		if err != nil {
			return nil, err
		}
		*outs[i], err = readAll(f, sizeHints[i])
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", dir, name, err)
		}
	}
	return w, nil
}

// bpfFSMagic is BPF_FS_MAGIC, the filesystem type of a BPF filesystem.
const bpfFSMagic = 0xcafe4a11

func trustedDir(dir string) error {
	for _, d := range []string{filepath.Dir(dir), dir} {
		var fs unix.Statfs_t
		var st unix.Stat_t
		if err := unix.Statfs(d, &fs); err != nil {
			return err
		}
		if err := unix.Lstat(d, &st); err != nil {
			return err
		}
		if fs.Type != bpfFSMagic || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o022 != 0 {
			return fmt.Errorf("%s: not a root-only directory on a BPF filesystem", d)
		}
	}
	return nil
}

// pin pins the links in dir, made root-only, and removes the pins of other
// builds: a host keeps one set. It pins nothing unless PinRoot's parent is a
// BPF filesystem; it never mounts one.
func pin(dir string, links [3]*link.Iter) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(PinRoot), &fs); err != nil || fs.Type != bpfFSMagic {
		return errors.New("no BPF filesystem")
	}
	old, _ := filepath.Glob(PinRoot + "/capture-*")
	for _, d := range old {
		if d != dir {
			_ = os.RemoveAll(d)
		}
	}
	for _, d := range []string{PinRoot, dir} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	if err := trustedDir(dir); err != nil {
		return err
	}
	for i, l := range links {
		// Another gpusnap may have pinned the same build meanwhile: EEXIST is its pin.
		if err := l.Pin(dir + "/" + iterNames[i]); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}

// readAll reads one pass of an iterator to its end. Records are decoded in
// place (see each): the buffer starts 8-aligned, as Go's allocations of
// this size are, and stays so as it grows.
func readAll(r io.Reader, size int) ([]byte, error) {
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF || (err == nil && n == 0) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// EachVMA calls fn for each mapping record and its path.
func (w *Walk) EachVMA(fn func(*VMARecord, []byte)) error {
	return each(w.VMAs, func(r *VMARecord) uint32 { return r.PathLen }, fn)
}

// EachFile calls fn for each open device file record and its path.
func (w *Walk) EachFile(fn func(*FileRecord, []byte)) error {
	return each(w.Files, func(r *FileRecord) uint32 { return r.PathLen }, fn)
}

// EachTask calls fn for each task record and its exe path.
func (w *Walk) EachTask(fn func(*TaskRecord, []byte)) error {
	return each(w.Tasks, func(r *TaskRecord) uint32 { return r.PathLen }, fn)
}

// each decodes records of type R in place: the kernel wrote them in this
// machine's layout (bpf2go's types mirror the C structs), and their sizes
// and padded paths keep each one 8-aligned. fn must not keep the pointer.
func each[R any](buf []byte, pathLen func(*R) uint32, fn func(*R, []byte)) error {
	size := int(unsafe.Sizeof(*new(R)))
	if len(buf) > 0 && uintptr(unsafe.Pointer(&buf[0]))%8 != 0 {
		return errors.New("iterator output is not 8-aligned")
	}
	for off := 0; off < len(buf); {
		if len(buf)-off < size {
			return fmt.Errorf("iterator output ends mid-record at byte %d", off)
		}
		r := (*R)(unsafe.Pointer(&buf[off]))
		off += size
		n := int(pathLen(r))
		padded := (n + 7) &^ 7
		if n > 4096 || len(buf)-off < padded {
			return fmt.Errorf("iterator record at byte %d has a path of %d bytes, %d left", off-size, n, len(buf)-off)
		}
		fn(r, buf[off:off+n])
		off += padded
	}
	return nil
}
