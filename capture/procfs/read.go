package procfs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/gpusnap/gpusnap/snapshot"
	"golang.org/x/sys/unix"
)

// Reader does the raw system calls of one capture worker, with buffers reused
// from process to process. It uses syscall directly rather than os, because
// os.Open registers every file with the runtime poller (an extra epoll_ctl
// per /proc file) and os.ReadFile allocates a fresh buffer per file, which
// together cost more than the parsing at this scale.
type Reader struct {
	// faults, when set (tests only), returns an error to report for a path
	// instead of touching it, so that a test can make a read refused even
	// to root.
	faults func(path string) error
	// quick says the reader is on the live procfs, where the calls marked
	// quick below are made with RawSyscall (see sys).
	quick bool
	// tree says the root is not the live procfs but a directory tree
	// someone handed over, whose every file is an adversary's (see openat).
	tree bool
	// NoOpenat2 says the kernel (before Linux 5.6) or a seccomp filter
	// refuses openat2, and OpenNoXdev is not tried again.
	NoOpenat2 bool
	how       unix.OpenHow // openNoXdev's, on the heap so that the kernel's pointer to it stays good
	name      []byte       // cName's
	dirBuf    []byte
	lnkBuf    []byte
	rest      []byte // what readCappedAt reads past what it keeps
	// BadNames keeps the first few directory entries that start with a
	// digit but are no canonical number in range ("04242", "0", "4194304").
	BadNames []string
}

// MaxFileSize bounds every file a capture reads, a process's maps (a
// tenant's 100,000 mappings are about 10 MB) and in a tree any file at all,
// where a sparse terabyte or /dev/zero would otherwise be read to the end.
const MaxFileSize = 64 << 20

// PIDMax is the kernel's PID_MAX_LIMIT (4194304), and no PID is at or above it.
const PIDMax = 1 << 22

var (
	errNotRegular = errors.New("not a regular file")
	errTooLarge   = errors.New("larger than 64 MiB (not read)")
	ErrTruncated  = errors.New("longer than 64 MiB (read no further)")
	errSymlink    = errors.New("a symbolic link in a --proc-root tree (not followed)")
)

// sys makes a system call. quick says procfs answers it from the task's own
// fields without waiting (O_PATH opens, listings, stat, status, readlink). On
// the live procfs (r.quick) such calls are RawSyscalls, sparing the runtime's
// bookkeeping. A call that can wait on a lock, driver or filesystem, or any
// in a tree, stays ordinary, since a blocked RawSyscall stalls GC.
func (r *Reader) sys(quick bool, trap, a1, a2, a3, a4 uintptr) (uintptr, error) {
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

// openat opens name in dirfd, retrying on EINTR (quick as in sys). In a tree,
// name is resolved beneath dirfd without following any symlink
// (RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) and opened O_NONBLOCK, so a link out
// of the tree is refused and a FIFO does not wait for a writer. On the live
// procfs the kernel's own links are the truth.
func (r *Reader) OpenAt(dirfd int, name string, flags int, quick bool) (int, error) {
	if r.tree {
		return r.openBeneath(dirfd, name, flags)
	}
	p, err := r.cName(name)
	if err != nil {
		return -1, err
	}
	for {
		fd, err := r.sys(quick, syscall.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(flags), 0)
		if err != syscall.EINTR {
			return int(fd), err
		}
	}
}

func (r *Reader) openBeneath(dirfd int, name string, flags int) (int, error) {
	if flags&unix.O_PATH == 0 {
		flags |= unix.O_NONBLOCK | unix.O_NOCTTY
	}
	how := unix.OpenHow{
		Flags:   uint64(flags),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for {
		fd, err := unix.Openat2(dirfd, name, &how)
		switch err {
		case nil:
			return fd, nil
		case syscall.EINTR, syscall.EAGAIN: // EAGAIN says a rename raced the lookup
			continue
		case syscall.ELOOP, syscall.EXDEV:
			return -1, errSymlink
		}
		return -1, err
	}
}

// OpenNoXdev opens directory name in dirfd (O_PATH) on the live procfs,
// refusing to cross a mount on the way (openat2 RESOLVE_NO_XDEV, EXDEV). It
// is quick (see sys). Where openat2 is refused (ENOSYS, or EPERM from a
// seccomp filter), NoOpenat2 is set and the error returned.
func (r *Reader) OpenNoXdev(dirfd int, name string) (int, error) {
	p, err := r.cName(name)
	if err != nil {
		return -1, err
	}
	r.how = unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_XDEV}
	for {
		fd, err := r.sys(true, unix.SYS_OPENAT2, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&r.how)), unsafe.Sizeof(r.how))
		switch err {
		case nil:
			return int(fd), nil
		case syscall.EINTR, syscall.EAGAIN:
			continue
		case syscall.ENOSYS, syscall.EPERM:
			r.NoOpenat2 = true
		}
		return -1, err
	}
}

// notRegular is the error for a tree's file of mode, which is no regular file.
func notRegular(mode uint32) error {
	what := map[uint32]string{unix.S_IFIFO: "a FIFO", unix.S_IFCHR: "a character device", unix.S_IFBLK: "a block device",
		unix.S_IFDIR: "a directory", unix.S_IFSOCK: "a socket"}[mode&unix.S_IFMT]
	return fmt.Errorf("is %s, %w (not read)", what, errNotRegular)
}

// cName returns name NUL-terminated in the reader's name buffer, valid
// until its next call. A capture passes the kernel tens of thousands of
// names, and a fresh copy of each (syscall.BytePtrFromString) was a fifth of
// its allocations. The buffer is on the heap, where it does not move while
// the kernel reads it.
func (r *Reader) cName(name string) (*byte, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return nil, syscall.EINVAL
	}
	r.name = append(append(r.name[:0], name...), 0)
	return &r.name[0], nil
}

// Close closes fd (quick as in sys).
func (r *Reader) Close(fd int, quick bool) {
	_, _ = r.sys(quick, syscall.SYS_CLOSE, uintptr(fd), 0, 0, 0)
}

func NewReader(faults func(string) error, quick, tree bool) *Reader {
	return &Reader{faults: faults, quick: quick, tree: tree, dirBuf: make([]byte, 8192), lnkBuf: make([]byte, 4096)}
}

// fault asks the test hook about dir/name (name alone when dir is ""),
// building the path only when there is a hook.
func (r *Reader) fault(dir, name string) error {
	if r.faults == nil {
		return nil
	}
	if dir == "" {
		return r.faults(name)
	}
	return r.faults(dir + "/" + name)
}

// ReadFileAt reads the whole of name in the directory open as dirfd (path
// dir) into buf[:0], growing it, until a read returns nothing, because seq
// files come a page at a time. A process's files are read relative to its
// /proc/PID directory, since a full path makes the kernel look up /proc/PID
// again each time.
func (r *Reader) ReadFileAt(dirfd int, dir, name string, buf []byte) ([]byte, error) {
	return r.read(dirfd, dir, name, buf, false, false)
}

// ReadWholeAt reads a file the kernel renders whole on the first read (the
// single_open seq files, cgroup among them). A read shorter than the buffer
// is its end, which saves the empty read that would confirm it.
func (r *Reader) ReadWholeAt(dirfd int, dir, name string, buf []byte) ([]byte, error) {
	return r.read(dirfd, dir, name, buf, true, false)
}

// ReadTaskFileAt reads stat or status, which the kernel renders whole on the
// first read from the task's own fields, taking no lock a tenant can hold. So
// a read shorter than the buffer is their end, and they are read with raw
// system calls (see sys, which also says why cgroup is not).
func (r *Reader) ReadTaskFileAt(dirfd int, dir, name string, buf []byte) ([]byte, error) {
	return r.read(dirfd, dir, name, buf, true, true)
}

// read reads name, at most MaxFileSize bytes of it. A longer file is an
// error (its first MaxFileSize bytes are returned with it). In a tree only a
// regular file of at most that size is read at all.
func (r *Reader) read(dirfd int, dir, name string, buf []byte, shortIsEnd, quick bool) ([]byte, error) {
	fd, err := r.OpenRead(dirfd, dir, name, quick)
	if err != nil {
		return buf[:0], err
	}
	defer r.Close(fd, quick)
	buf, full, err := r.ReadFd(fd, buf[:0], MaxFileSize, shortIsEnd, quick)
	if err == nil && full {
		err = ErrTruncated // a live file (a tree's was checked before), read for its first 64 MiB
	}
	return buf, err
}

// ReadCappedAt reads name keeping at most limit bytes. A longer file is read
// on to its end or MaxFileSize, unkept, and named by its length and SHA-256
// in the Cut. cmdline is read so (a short read is its end), and maps where
// only its raw text is kept, as a tenant's can be 10 MB.
func (r *Reader) ReadCappedAt(dirfd int, dir, name string, buf []byte, limit int, shortIsEnd bool) ([]byte, *snapshot.Cut, error) {
	fd, err := r.OpenRead(dirfd, dir, name, false)
	if err != nil {
		return buf[:0], nil, err
	}
	defer r.Close(fd, false)
	buf, full, err := r.ReadFd(fd, buf[:0], limit, shortIsEnd, false)
	if err != nil || !full {
		return buf, nil, err
	}
	h := sha256.New()
	h.Write(buf)
	n := int64(len(buf))
	if cap(r.rest) == 0 {
		r.rest = make([]byte, 64<<10)
	}
	for n < MaxFileSize {
		k, err := syscall.Read(fd, r.rest[:min(int64(len(r.rest)), MaxFileSize-n)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return buf, nil, err
		}
		if k == 0 {
			break
		}
		h.Write(r.rest[:k])
		n += int64(k)
	}
	if n == int64(len(buf)) {
		return buf, nil, nil // exactly limit bytes, so nothing was cut
	}
	return buf, &snapshot.Cut{Length: n, SHA256: hex.EncodeToString(h.Sum(nil)), Partial: n >= MaxFileSize}, nil
}

// OpenRead opens name to read it. In a tree only a regular file of at most
// MaxFileSize is opened at all.
func (r *Reader) OpenRead(dirfd int, dir, name string, quick bool) (int, error) {
	if err := r.fault(dir, name); err != nil {
		return -1, err
	}
	fd, err := r.OpenAt(dirfd, name, syscall.O_RDONLY|syscall.O_CLOEXEC, quick)
	if err != nil || !r.tree {
		return fd, err
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	switch {
	case err != nil:
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = notRegular(st.Mode)
	case st.Size > MaxFileSize:
		err = errTooLarge
	}
	if err != nil {
		r.Close(fd, quick)
		return -1, err
	}
	return fd, nil
}

// ReadFd appends what fd holds to buf, growing it, until a read returns
// nothing (or, with shortIsEnd, less than asked) or buf holds limit bytes,
// which full reports.
func (r *Reader) ReadFd(fd int, buf []byte, limit int, shortIsEnd, quick bool) (_ []byte, full bool, err error) {
	for {
		if len(buf) >= limit {
			return buf, true, nil
		}
		if len(buf) == cap(buf) {
			// The buffer doubles, up to limit, where append grows a large
			// slice by a quarter, and each growth copies (and touches fresh
			// pages for) all that was read so far.
			buf = slices.Grow(buf, min(max(len(buf), 4096), limit-len(buf)))
		}
		want := min(cap(buf), limit) - len(buf)
		un, err := r.sys(quick, syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&buf[len(buf):cap(buf)][0])), uintptr(want), 0)
		n := int(un)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return buf, false, err
		}
		if n == 0 {
			return buf, false, nil
		}
		buf = buf[:len(buf)+n]
		if shortIsEnd && n < want {
			return buf, false, nil
		}
	}
}

// ReadlinkAt reads the link name in the directory open as dirfd, whose path
// is dir.
func (r *Reader) ReadlinkAt(dirfd int, dir, name string) (string, error) {
	b, err := r.ReadlinkBytesAt(dirfd, dir, name)
	return string(b), err
}

// ReadlinkBytesAt is ReadlinkAt into the reader's buffer, valid until its
// next readlink, since most fd links (sockets, pipes) are looked at and dropped.
func (r *Reader) ReadlinkBytesAt(dirfd int, dir, name string) ([]byte, error) {
	if err := r.fault(dir, name); err != nil {
		return nil, err
	}
	if i := strings.LastIndexByte(name, '/'); i >= 0 && r.tree {
		// The link itself is never followed, but the directories on its
		// way could be links out of the tree, so they are opened beneath it first.
		parent, err := r.OpenAt(dirfd, name[:i], unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, false)
		if err != nil {
			return nil, err
		}
		defer r.Close(parent, false)
		dirfd, name = parent, name[i+1:]
	}
	p, err := r.cName(name)
	if err != nil {
		return nil, err
	}
	for {
		un, err := r.sys(true, unix.SYS_READLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&r.lnkBuf[0])), uintptr(len(r.lnkBuf)))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		n := int(un)
		if n < len(r.lnkBuf) {
			return r.lnkBuf[:n], nil
		}
		r.lnkBuf = make([]byte, 2*len(r.lnkBuf))
	}
}

// StatAt stats name in the directory open as dirfd, whose path is dir,
// following links (as stat of map_files and fd links must).
func (r *Reader) StatAt(dirfd int, dir, name string) (snapshot.FileKind, error) {
	if err := r.fault(dir, name); err != nil {
		return snapshot.FileKind{}, err
	}
	// statx runs with AT_STATX_DONT_SYNC. A file's type and device number
	// never change, so cached attributes are the truth, and a mapped file on
	// a dead NFS or Lustre server does not hang the capture on a round trip
	// to it.
	p, err := r.cName(name)
	if err != nil {
		return snapshot.FileKind{}, err
	}
	var st unix.Statx_t
	for {
		_, _, e := syscall.Syscall6(unix.SYS_STATX, uintptr(dirfd), uintptr(unsafe.Pointer(p)), unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE, uintptr(unsafe.Pointer(&st)), 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return snapshot.FileKind{}, e
		}
		break
	}
	switch uint32(st.Mode) & syscall.S_IFMT {
	case syscall.S_IFCHR, syscall.S_IFBLK:
		return snapshot.FileKind{
			Device: true,
			Char:   uint32(st.Mode)&syscall.S_IFMT == syscall.S_IFCHR,
			Major:  st.Rdev_major,
			Minor:  st.Rdev_minor,
		}, nil
	case 0:
		return snapshot.FileKind{Anon: true}, nil
	}
	return snapshot.FileKind{}, nil
}

// PidfdInfo asks the kernel, through pidfd, for the credentials of its
// process (PIDFD_GET_INFO). pidfd_open, the ioctl and close wait on
// nothing, so they are quick (see sys).
func (r *Reader) PidfdInfo(pidfd int) (unix.PidfdInfo, error) {
	info := unix.PidfdInfo{Mask: unix.PIDFD_INFO_CREDS}
	_, err := r.sys(true, unix.SYS_IOCTL, uintptr(pidfd), unix.PIDFD_GET_INFO, uintptr(unsafe.Pointer(&info)), 0)
	return info, err
}

// PidfdOpen opens a pidfd of process pid (see PidfdInfo).
func (r *Reader) PidfdOpen(pid int) (int, error) {
	fd, err := r.sys(true, unix.SYS_PIDFD_OPEN, uintptr(pid), 0, 0, 0)
	return int(fd), err
}

// ListPIDs lists the PIDs in the open proc root dirfd, in directory order.
func (r *Reader) ListPIDs(dirfd int) ([]int, error) {
	fd, err := r.OpenDirAt(dirfd, "", ".")
	if err != nil {
		return nil, err
	}
	defer r.Close(fd, true)
	return r.ListInts(fd, nil, 1, PIDMax-1)
}

// OpenDirAt opens directory name (in dirfd, whose path is dir) to list it
// and to stat and readlink its entries relative to it, which spares the
// kernel the walk of its path per entry.
func (r *Reader) OpenDirAt(dirfd int, dir, name string) (int, error) {
	if err := r.fault(dir, name); err != nil {
		return -1, err
	}
	return r.OpenAt(dirfd, name, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, true)
}

// ListInts appends the numeric names of the open directory fd, from lo to hi,
// to out, counting other numeric-looking names in BadNames. It reads until a
// getdents returns nothing, because procfs stops one short when a signal is
// pending, and the Go runtime preempts with signals.
func (r *Reader) ListInts(fd int, out []int, lo, hi uint64) ([]int, error) {
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
		out = r.appendDirentInts(r.dirBuf[:n], out, lo, hi)
	}
}

// appendDirentInts parses linux_dirent64 records and keeps the names that are
// canonical decimal numbers from lo to hi, without allocating a string per
// name. A name with a leading zero ("04242") would be read as another
// entry's number a second time, so it is no number, nor is one out of range.
func (r *Reader) appendDirentInts(buf []byte, out []int, lo, hi uint64) []int {
	const nameOff = 19 // d_ino 8, d_off 8, d_reclen 2, d_type 1
	for len(buf) >= nameOff {
		reclen := int(buf[16]) | int(buf[17])<<8
		if reclen < nameOff || reclen > len(buf) {
			break
		}
		name := nulTrim(buf[nameOff:reclen])
		buf = buf[reclen:]
		if len(name) == 0 || name[0] < '0' || name[0] > '9' {
			continue // ".", "..", "self", "sys" are not meant as numbers
		}
		v, ok := ParseDec(name)
		if ok && v >= lo && v <= hi && (name[0] != '0' || len(name) == 1) {
			out = append(out, int(v))
			continue
		}
		if len(r.BadNames) < 8 {
			r.BadNames = append(r.BadNames, string(name))
		}
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

// VanishedErr reports whether err means the process is gone, ENOENT once its
// directory is gone, ESRCH while the kernel tears it down.
func VanishedErr(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESRCH)
}

// RefusedErr reports whether err is the kernel refusing the read, for a
// non-dumpable process, PID 1 in some containers, or no ptrace access.
func RefusedErr(err error) bool {
	return errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)
}

// PIDDir is root/pid without fmt.
func PIDDir(root string, pid int) string {
	return root + "/" + strconv.Itoa(pid)
}
