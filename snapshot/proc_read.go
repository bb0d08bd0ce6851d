package snapshot

import (
	"errors"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// reader does the raw system calls of one capture worker, with buffers reused
// from process to process. It uses syscall directly rather than os: os.Open
// registers every file with the runtime poller (an extra epoll_ctl per /proc
// file) and os.ReadFile allocates a fresh buffer per file, which together cost
// more than the parsing at this scale.
type reader struct {
	// faults, when set (tests only), returns an error to report for a path
	// instead of touching it: how tests make a read refused even to root.
	faults func(path string) error
	// quick: the reader is on the live procfs, where the calls marked quick
	// below are made with RawSyscall (see sys).
	quick  bool
	dirBuf []byte
	lnkBuf []byte
}

// sys makes a system call; quick says procfs answers it from the task's own
// fields without waiting on anything: opening (O_PATH), listing and closing
// its directories, opening, reading and closing stat, status, cgroup and
// fdinfo, and readlink (which renders a path). Then, on the live procfs
// (r.quick), it is a RawSyscall: the worker keeps its P, and the runtime's
// bookkeeping around each of the ~30 calls a process costs (entering and
// leaving the syscall state, sysmon handing the P to another thread) is
// skipped. Calls that can wait on the target or on a filesystem stay
// ordinary system calls: maps and cmdline (their open waits out the target's
// exec, their read takes its mmap lock), stat of an fd or a mapped file (it
// asks the file's own filesystem, NFS included), and everything in a fixture
// tree, which may sit on any filesystem.
func (r *reader) sys(quick bool, trap, a1, a2, a3, a4 uintptr) (uintptr, error) {
	var n uintptr
	var e syscall.Errno
	if quick && r.quick {
		n, _, e = syscall.RawSyscall6(trap, a1, a2, a3, a4, 0, 0)
	} else {
		n, _, e = syscall.Syscall6(trap, a1, a2, a3, a4, 0, 0)
	}
	if e != 0 {
		return n, e
	}
	return n, nil
}

// openat opens name in dirfd, retrying on EINTR (quick: see sys).
func (r *reader) openat(dirfd int, name string, flags int, quick bool) (int, error) {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	// The pointers passed as uintptr are kept alive by hand: only a direct
	// call of syscall.Syscall keeps them alive by itself.
	defer runtime.KeepAlive(p)
	for {
		fd, err := r.sys(quick, syscall.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(flags), 0)
		if err != syscall.EINTR {
			return int(fd), err
		}
	}
}

// close closes fd (quick: see sys).
func (r *reader) close(fd int, quick bool) {
	_, _ = r.sys(quick, syscall.SYS_CLOSE, uintptr(fd), 0, 0, 0)
}

func newReader(faults func(string) error, quick bool) *reader {
	return &reader{faults: faults, quick: quick, dirBuf: make([]byte, 8192), lnkBuf: make([]byte, 4096)}
}

// fault asks the test hook about dir/name (name alone when dir is ""),
// building the path only when there is a hook.
func (r *reader) fault(dir, name string) error {
	if r.faults == nil {
		return nil
	}
	if dir == "" {
		return r.faults(name)
	}
	return r.faults(dir + "/" + name)
}

// readFile reads the whole of path into buf[:0], growing it as needed,
// until a read returns nothing: maps and other multi-record seq files come a
// page at a time, so a short read is not their end.
func (r *reader) readFile(path string, buf []byte) ([]byte, error) {
	return r.read(unix.AT_FDCWD, "", path, buf, false, false)
}

// readFileAt is readFile of name in the directory open as dirfd, whose path
// is dir. A process's files are read relative to its /proc/PID directory:
// a full path makes the kernel look up and revalidate /proc/PID again for
// every file.
func (r *reader) readFileAt(dirfd int, dir, name string, buf []byte) ([]byte, error) {
	return r.read(dirfd, dir, name, buf, false, false)
}

// readWholeAt reads a file the kernel renders whole on the first read (the
// single_open seq files stat, status, cgroup and fdinfo, and cmdline, which
// copies as much as asked): a read shorter than the buffer is its end, which
// saves the empty read that would confirm it, one syscall per file.
func (r *reader) readWholeAt(dirfd int, dir, name string, buf []byte) ([]byte, error) {
	return r.read(dirfd, dir, name, buf, true, false)
}

// readQuickAt is readWholeAt of stat, status, cgroup or fdinfo, whose reads
// are quick (see sys).
func (r *reader) readQuickAt(dirfd int, dir, name string, buf []byte) ([]byte, error) {
	return r.read(dirfd, dir, name, buf, true, true)
}

func (r *reader) read(dirfd int, dir, name string, buf []byte, shortIsEnd, quick bool) ([]byte, error) {
	buf = buf[:0]
	if err := r.fault(dir, name); err != nil {
		return buf, err
	}
	fd, err := r.openat(dirfd, name, syscall.O_RDONLY|syscall.O_CLOEXEC, quick)
	if err != nil {
		return buf, err
	}
	defer r.close(fd, quick)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		un, err := r.sys(quick, syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&buf[len(buf):cap(buf)][0])), uintptr(cap(buf)-len(buf)), 0)
		n := int(un)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return buf, err
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
		if shortIsEnd && len(buf) < cap(buf) {
			return buf, nil
		}
	}
}

// readlinkAt reads the link name in the directory open as dirfd, whose path
// is dir.
func (r *reader) readlinkAt(dirfd int, dir, name string) (string, error) {
	if err := r.fault(dir, name); err != nil {
		return "", err
	}
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return "", err
	}
	defer runtime.KeepAlive(p)
	for {
		un, err := r.sys(true, unix.SYS_READLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&r.lnkBuf[0])), uintptr(len(r.lnkBuf)))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return "", err
		}
		n := int(un)
		if n < len(r.lnkBuf) {
			return string(r.lnkBuf[:n]), nil
		}
		r.lnkBuf = make([]byte, 2*len(r.lnkBuf))
	}
}

// statAt stats name in the directory open as dirfd, whose path is dir,
// following links (as stat of map_files and fd links must).
func (r *reader) statAt(dirfd int, dir, name string) (FileKind, error) {
	if err := r.fault(dir, name); err != nil {
		return FileKind{}, err
	}
	// statx with AT_STATX_DONT_SYNC: a file's type and device number never
	// change, so cached attributes are the truth, and a mapped file on a dead
	// NFS or Lustre server does not hang the capture on a round trip to it.
	var st unix.Statx_t
	for {
		err := unix.Statx(dirfd, name, unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE, &st)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return FileKind{}, err
		}
		break
	}
	switch uint32(st.Mode) & syscall.S_IFMT {
	case syscall.S_IFCHR, syscall.S_IFBLK:
		return FileKind{
			Device: true,
			Char:   uint32(st.Mode)&syscall.S_IFMT == syscall.S_IFCHR,
			Major:  st.Rdev_major,
			Minor:  st.Rdev_minor,
		}, nil
	}
	return FileKind{}, nil
}

// readDirInts lists the numeric names of directory path (PIDs, fd numbers),
// in directory order, appended to out.
func (r *reader) readDirInts(path string, out []int) ([]int, error) {
	fd, err := r.openDirAt(unix.AT_FDCWD, "", path)
	if err != nil {
		return out, err
	}
	defer r.close(fd, true)
	return r.listInts(fd, out)
}

// openDirAt opens directory name (in dirfd, whose path is dir) to list it
// and to stat and readlink its entries relative to it, which spares the
// kernel the walk of its path per entry.
func (r *reader) openDirAt(dirfd int, dir, name string) (int, error) {
	if err := r.fault(dir, name); err != nil {
		return -1, err
	}
	return r.openat(dirfd, name, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, true)
}

// listInts appends the numeric names of the open directory fd to out. It
// reads until a getdents returns nothing: even procfs, which otherwise fills
// each getdents, stops one short when a signal is pending (the Go runtime
// preempts goroutines with signals), so a result with room to spare is not
// the end.
func (r *reader) listInts(fd int, out []int) ([]int, error) {
	for {
		un, err := r.sys(true, unix.SYS_GETDENTS64, uintptr(fd), uintptr(unsafe.Pointer(&r.dirBuf[0])), uintptr(len(r.dirBuf)), 0)
		n := int(un)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return out, err
		}
		if n <= 0 {
			return out, nil
		}
		out = appendDirentInts(r.dirBuf[:n], out)
	}
}

// appendDirentInts parses linux_dirent64 records and keeps the names that are
// decimal numbers, without allocating a string per name.
func appendDirentInts(buf []byte, out []int) []int {
	const nameOff = 19 // d_ino 8, d_off 8, d_reclen 2, d_type 1
	for len(buf) >= nameOff {
		reclen := int(buf[16]) | int(buf[17])<<8
		if reclen < nameOff || reclen > len(buf) {
			break
		}
		name := buf[nameOff:reclen]
		if v, ok := parseDec(nulTrim(name)); ok && v <= 1<<31 {
			out = append(out, int(v))
		}
		buf = buf[reclen:]
	}
	return out
}

func nulTrim(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

// vanishedErr reports whether err means the process is gone: ENOENT once its
// directory is gone, ESRCH while the kernel tears it down.
func vanishedErr(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESRCH)
}

// refusedErr reports whether err is the kernel refusing the read: a
// non-dumpable process, PID 1 in some containers, or no ptrace access.
func refusedErr(err error) bool {
	return errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)
}

// pidDir is root/pid without fmt.
func pidDir(root string, pid int) string {
	return root + "/" + strconv.Itoa(pid)
}
