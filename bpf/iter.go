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

// Flags of a record (enum rec_flag in c/iter.c).
const (
	RecordPathError = uint32(iterRecFlagREC_PATH_ERROR) // d_path failed, so the record has no path
	RecordNSpidDeep = uint32(iterRecFlagREC_NSPID_DEEP) // more pid namespace levels than TaskRecord.Nspid holds
	RecordMMBusy    = uint32(iterRecFlagREC_MM_BUSY)    // on a VMAUnwalked, the process's mmap lock was held
	RecordTooMany   = uint32(iterRecFlagREC_TOO_MANY)   // on a VMAUnwalked, more device mappings than one walk writes
	RecordOwnTable  = uint32(iterRecFlagREC_OWN_TABLE)  // a FileRecord of a thread's own fd table (cloned without CLONE_FILES)
	RecordCmdline   = uint32(iterRecFlagREC_CMDLINE)    // a TaskRecord whose whole command line follows (else /proc has it)
	// RecordNoScratch marks a VMAUnwalked or a FileRecord whose process the
	// kernel had no memory to render. Read that process from /proc.
	RecordNoScratch = uint32(iterRecFlagREC_NO_SCRATCH)
	// RecordExeProc marks a TaskRecord without its exe, which the kernel's
	// program could not take. Read /proc/PID/exe.
	RecordExeProc = uint32(iterRecFlagREC_EXE_PROC)
	// RecordRing marks a FileRecord of an io_uring instance, not a device,
	// with no path. The files it has registered are listed in its fdinfo
	// only.
	RecordRing = uint32(iterRecFlagREC_RING)
	// RecordPathProc marks a VMAUnwalked whose process maps a file (a device,
	// a DMA-buf) that a _proc_path walk does not name. Read it from /proc.
	RecordPathProc = uint32(iterRecFlagREC_PATH_PROC)

	// recordSamePath marks a mapping of the same file as the record before,
	// whose path (or path error) it shares. EachVMA hands over that path.
	recordSamePath = uint32(iterRecFlagREC_SAME_PATH)
)

// Kinds of a VMARecord (enum vma_kind in c/iter.c).
const (
	VMADevice   = uint32(iterVmaKindVMA_DEVICE)    // a device node
	VMADMABuf   = uint32(iterVmaKindVMA_DMABUF)    // a DMA-buf, with the path /dmabuf:NAME
	VMAAnonExec = uint32(iterVmaKindVMA_ANON_EXEC) // anonymous executable, 64 MiB or more, with its anon_vma_name (if any) as path
	// VMAUnwalked marks a process whose mappings were not walked, or not all
	// (the records before it are some of them). Read them from /proc. Its
	// RecFlags say why (RecordMMBusy, RecordTooMany, RecordPathProc).
	VMAUnwalked = uint32(iterVmaKindVMA_UNWALKED)
)

// Walk is one pass of the capture iterators, opened and not yet read. Its
// Each methods read each iterator's records and decode them as they come, a
// buffer at a time, so a walk's memory stays bounded however many mappings a
// tenant makes. Read tasks, then mappings, then files, then Close it. How
// says how the iterators ran.
type Walk struct {
	How string

	tasks, vmas, files io.ReadCloser
	maps               iterMaps        // loaded for this walk, else none (pinned)
	progs              []*ebpf.Program // loaded for this walk
	links              [3]*link.Iter   // the links of progs
	buf                []byte          // the read buffer, reused by each iterator
	lastPath           []byte          // the path of the mapping record before
}

// PinRoot is where OpenWalk pins the iterators on a mounted BPF filesystem. A
// later capture reads pinned iterators as files and spares the BTF parse and
// verification of a load, which cost far more than the walk. Each build of
// the programs pins under its own hash, so a newer gpusnap never reads an
// older one's records.
var PinRoot = "/sys/fs/bpf/gpusnap"

// iterNames are the pinned iterators' file names, in Walk's order.
var iterNames = [3]string{"tasks", "vmas", "files"}

// TaskPrograms and VMAPrograms are the programs of the task and mapping
// iterators, best first (c/iter.c). OpenWalk loads the first of each that the
// kernel takes.
var (
	// TaskPrograms render the exe in the kernel, else leave it to
	// /proc/PID/exe.
	TaskPrograms = []string{"gpusnap_tasks", "gpusnap_tasks_proc_exe"}
	// VMAPrograms are the open-coded task_vma iterator (6.7), else the
	// task_vma iterator's program (5.12) with one call a mapping. The same
	// two follow again, leaving the processes that map a file to /proc, for
	// kernels whose verifier will not name vma->vm_file (some 6.18 builds).
	VMAPrograms = []string{"gpusnap_vmas", "gpusnap_vma", "gpusnap_vmas_proc_path", "gpusnap_vma_proc_path"}
)

// OpenWalk opens each capture iterator over the caller's pid namespace. It
// opens their pins under PinRoot where a trusted pin directory holds them,
// else loads them now (and pins them where PinRoot's parent is a BPF
// filesystem). Its error says why the kernel refused (no CAP_BPF and
// CAP_PERFMON, no BTF, a kernel without iterators).
func OpenWalk() (*Walk, error) {
	dir := pinDir()
	if w, err := openPinned(dir); err == nil {
		w.How = "pinned iterators in " + dir
		return w, nil
	}
	w, err := OpenWalkWith(TaskPrograms, VMAPrograms)
	if err != nil {
		return nil, err
	}
	if err := pin(dir, w.links); err == nil {
		w.How += ", pinned in " + dir
	}
	return w, nil
}

// OpenWalkWith loads the iterators now, neither read from pins nor pinned,
// with the first of tasks and of vmas (names of TaskPrograms and
// VMAPrograms) that the kernel takes. How names the programs that loaded
// and why each one before them did not.
func OpenWalkWith(tasks, vmas []string) (*Walk, error) {
	spec, err := loadIter()
	if err != nil {
		return nil, fmt.Errorf("the capture iterators: %w", err)
	}
	w := &Walk{How: "iterators loaded for this capture"}
	if err := spec.LoadAndAssign(&w.maps, nil); err != nil {
		return nil, loadError("load the iterators' maps", err)
	}
	var progs [3]*ebpf.Program
	for i, names := range [3][]string{tasks, vmas, {"gpusnap_files"}} {
		if progs[i], err = w.loadFirst(spec, names); err != nil {
			w.Close()
			return nil, fmt.Errorf("load %s iterator: %w", iterNames[i], err)
		}
	}
	outs := [3]*io.ReadCloser{&w.tasks, &w.vmas, &w.files}
	for i, prog := range progs {
		l, err := link.AttachIter(link.IterOptions{Program: prog})
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("%s iterator: %w", iterNames[i], err)
		}
		w.links[i] = l
		if *outs[i], err = l.Open(); err != nil {
			w.Close()
			return nil, fmt.Errorf("%s iterator: %w", iterNames[i], err)
		}
	}
	return w, nil
}

// loadFirst loads the first program of names that the kernel takes, with
// the walk's maps, and notes in How each one refused before it.
func (w *Walk) loadFirst(spec *ebpf.CollectionSpec, names []string) (*ebpf.Program, error) {
	var refused refusals
	for _, name := range names {
		if spec.Programs[name] == nil {
			return nil, fmt.Errorf("the capture object has no program %s", name)
		}
		sub := spec.Copy()
		sub.Programs = map[string]*ebpf.ProgramSpec{name: spec.Programs[name]}
		// The programs use no global data, so the .bss that holds the unused
		// variables keeping the enums in BTF (c/iter.c) is not made.
		sub.Maps = map[string]*ebpf.MapSpec{"scratch_map": spec.Maps["scratch_map"]}
		sub.Variables = nil
		coll, err := ebpf.NewCollectionWithOptions(sub, ebpf.CollectionOptions{
			MapReplacements: map[string]*ebpf.Map{"scratch_map": w.maps.ScratchMap}})
		if err != nil {
			refused = append(refused, loadError(name, err))
			continue
		}
		prog := coll.DetachProgram(name)
		coll.Close()
		w.progs = append(w.progs, prog)
		w.How += ", " + name
		if len(refused) > 0 {
			w.How += " (refused: " + refused.Error() + ")"
		}
		return prog, nil
	}
	return nil, refused
}

// Close closes the iterators and what was loaded for them.
func (w *Walk) Close() {
	for _, r := range []io.ReadCloser{w.tasks, w.vmas, w.files} {
		if r != nil {
			r.Close()
		}
	}
	for _, l := range w.links {
		if l != nil {
			l.Close()
		}
	}
	for _, p := range w.progs {
		p.Close()
	}
	w.maps.Close()
}

func pinDir() string {
	return PinRoot + "/capture-" + CaptureBuild()
}

// CaptureBuild names this build of the capture programs by the first bytes of
// their object's SHA-256, in hex. A kernel that refused one build may take
// another.
func CaptureBuild() string {
	sum := sha256.Sum256(_IterBytes)
	return hex.EncodeToString(sum[:8])
}

// openPinned opens the iterators pinned in dir. It trusts only a directory on
// a BPF filesystem that root owns and only root can write, since anyone who
// can write there could pin a program that lies.
func openPinned(dir string) (*Walk, error) {
	if err := trustedDir(dir); err != nil {
		return nil, err
	}
	w := &Walk{}
	outs := [3]*io.ReadCloser{&w.tasks, &w.vmas, &w.files}
	for i, name := range iterNames {
		f, err := os.Open(dir + "/" + name)
		if err != nil {
			w.Close()
			return nil, err
		}
		*outs[i] = f
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
// builds so that a host keeps one set. It pins nothing unless PinRoot's
// parent is a BPF filesystem, and it never mounts one.
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
		// Another gpusnap may have pinned the same build meanwhile, and
		// EEXIST is its pin.
		if err := l.Pin(dir + "/" + iterNames[i]); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}

// EachTask calls fn for each task record, its exe path and, where
// RecFlags has RecordCmdline, its command line.
func (w *Walk) EachTask(fn func(r *TaskRecord, exe, cmdline []byte)) error {
	return w.each(w.tasks, "tasks", func(b []byte) (int, int) {
		return decodeRecords(b, func(r *TaskRecord) (int, bool) {
			return pad8(r.PathLen) + pad8(r.CmdLen), r.PathLen <= pathMax && r.CmdLen <= cmdMax
		}, func(r *TaskRecord, tail []byte) {
			fn(r, tail[:r.PathLen], tail[pad8(r.PathLen):][:r.CmdLen])
		})
	})
}

// EachVMA calls fn for each mapping record and its path.
func (w *Walk) EachVMA(fn func(*VMARecord, []byte)) error {
	var lastErr uint32
	return w.each(w.vmas, "vmas", func(b []byte) (int, int) {
		return decodeRecords(b, func(r *VMARecord) (int, bool) { return pad8(r.PathLen), r.PathLen <= pathMax }, func(r *VMARecord, tail []byte) {
			path := tail[:r.PathLen]
			// The kernel renders the path of a run of mappings of one file
			// once, in the run's first record.
			if r.RecFlags&recordSamePath != 0 {
				r.RecFlags |= lastErr
				fn(r, w.lastPath)
				return
			}
			w.lastPath, lastErr = append(w.lastPath[:0], path...), r.RecFlags&RecordPathError
			fn(r, path)
		})
	})
}

// EachFile calls fn for each open device file record and its path.
func (w *Walk) EachFile(fn func(*FileRecord, []byte)) error {
	return w.each(w.files, "files", func(b []byte) (int, int) {
		return decodeRecords(b, func(r *FileRecord) (int, bool) { return pad8(r.PathLen), r.PathLen <= pathMax }, func(r *FileRecord, tail []byte) {
			fn(r, tail[:r.PathLen])
		})
	})
}

// The most a record carries after its header is a path (PATH_MAX) and a
// command line.
const (
	pathMax = uint32(iterIterLimitPATH_LEN)
	cmdMax  = uint32(iterIterLimitCMD_LEN)
)

func pad8(n uint32) int { return (int(n) + 7) &^ 7 }

// readBuf is the size of a walk's read buffer. It holds several of the
// kernel's 32 KiB seq buffers a read, and far more than the largest record.
const readBuf = 128 << 10

// each reads one iterator to its end, a buffer at a time, and decodes the
// whole records each read completes. The start of a record cut by the end of
// a read is carried to the front of the buffer, which keeps records 8-aligned
// because the buffer is, as Go's allocations of this size are.
func (w *Walk) each(r io.Reader, name string, decodeAll func([]byte) (used, need int)) error {
	if r == nil {
		return fmt.Errorf("%s iterator: not open", name)
	}
	if w.buf == nil {
		w.buf = make([]byte, readBuf)
	}
	buf := w.buf
	n := 0 // bytes in buf
	for {
		k, err := r.Read(buf[n:])
		n += k
		if err != nil && err != io.EOF {
			return fmt.Errorf("%s iterator: %w", name, err)
		}
		used, need := decodeAll(buf[:n])
		if need < 0 {
			return fmt.Errorf("%s iterator: record at byte %d claims a path or command line past its bounds", name, used)
		}
		n = copy(buf, buf[used:n])
		if err == io.EOF || k == 0 {
			if n > 0 {
				return fmt.Errorf("%s iterator: output ends mid-record (%d bytes left)", name, n)
			}
			return nil
		}
	}
}

// decodeRecords decodes, in place, the whole records of type R at the start
// of buf, which the kernel wrote 8-aligned in this machine's layout. tail
// gives the bytes after a header and whether its lengths are in bounds, and
// fn must not keep the pointer. It returns the bytes used, and need < 0 for a
// record out of bounds.
func decodeRecords[R any](buf []byte, tail func(*R) (int, bool), fn func(*R, []byte)) (used, need int) {
	size := int(unsafe.Sizeof(*new(R)))
	off := 0
	for len(buf)-off >= size {
		r := (*R)(unsafe.Pointer(&buf[off]))
		n, ok := tail(r)
		if !ok {
			return off, -1
		}
		if len(buf)-off-size < n {
			break
		}
		fn(r, buf[off+size:off+size+n])
		off += size + n
	}
	return off, 0
}
