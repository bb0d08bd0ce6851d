package snapshot

import (
	"errors"
	"strconv"
	"syscall"
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
	dirBuf []byte
	lnkBuf []byte
}

func newReader(faults func(string) error) *reader {
	return &reader{faults: faults, dirBuf: make([]byte, 8192), lnkBuf: make([]byte, 4096)}
}

func (r *reader) fault(path string) error {
	if r.faults == nil {
		return nil
	}
	return r.faults(path)
}

// readFile reads the whole of path into buf[:0], growing it as needed.
func (r *reader) readFile(path string, buf []byte) ([]byte, error) {
	buf = buf[:0]
	if err := r.fault(path); err != nil {
		return buf, err
	}
	fd, err := openRetry(path, syscall.O_RDONLY|syscall.O_CLOEXEC)
	if err != nil {
		return buf, err
	}
	defer syscall.Close(fd)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
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
	}
}

// readlink returns the target of the link at path.
func (r *reader) readlink(path string) (string, error) {
	if err := r.fault(path); err != nil {
		return "", err
	}
	for {
		n, err := syscall.Readlink(path, r.lnkBuf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return "", err
		}
		if n < len(r.lnkBuf) {
			return string(r.lnkBuf[:n]), nil
		}
		r.lnkBuf = make([]byte, 2*len(r.lnkBuf))
	}
}

// stat stats path (following links, as stat of map_files and fd do).
func (r *reader) stat(path string) (FileKind, error) {
	if err := r.fault(path); err != nil {
		return FileKind{}, err
	}
	var st syscall.Stat_t
	for {
		err := syscall.Stat(path, &st)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return FileKind{}, err
		}
		break
	}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFCHR, syscall.S_IFBLK:
		return FileKind{
			Device: true,
			Char:   st.Mode&syscall.S_IFMT == syscall.S_IFCHR,
			Major:  uint32((st.Rdev>>8)&0xfff | (st.Rdev>>32)&^0xfff),
			Minor:  uint32(st.Rdev&0xff | (st.Rdev>>12)&^0xff),
		}, nil
	}
	return FileKind{}, nil
}

// readDirInts lists the numeric names of directory path (PIDs, fd numbers),
// in directory order, appended to out.
func (r *reader) readDirInts(path string, out []int) ([]int, error) {
	if err := r.fault(path); err != nil {
		return out, err
	}
	fd, err := openRetry(path, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC)
	if err != nil {
		return out, err
	}
	defer syscall.Close(fd)
	for {
		n, err := syscall.ReadDirent(fd, r.dirBuf)
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

func openRetry(path string, flags int) (int, error) {
	for {
		fd, err := syscall.Open(path, flags, 0)
		if err != syscall.EINTR {
			return fd, err
		}
	}
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

// pidPath is root/pid/name without fmt.
func pidPath(root string, pid int, name string) string {
	return root + "/" + strconv.Itoa(pid) + "/" + name
}
