package capture

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/snapshot"
	"golang.org/x/sys/unix"
)

// /proc/PID/fd/N links to what fd N has open, a path, "socket:[ino]",
// "pipe:[ino]" or "anon_inode:...". stat follows the link to the open file,
// so its type and device number are true even for a node in another mount
// namespace.
//
// procfs FileDescriptorTargets is not used, as it drops fd numbers and
// hides an unreadable link as "".

// holders reads the fd directory of the task open as taskfd (a process's
// directory, or a thread's task/TID) and returns its device holders. err is
// the error of listing the directory or a refusal of its links, or that of
// an io_uring whose registered files could not all be read (ringHolders).
// errs are per-fd errors worth recording.
func (w *worker) holders(taskfd int, taskDir string) (hs []snapshot.Holder, errs []string, err error) {
	dir := taskDir + "/fd"
	dirfd, err := w.r.OpenDirAt(taskfd, taskDir, "fd")
	if err != nil {
		return nil, nil, err
	}
	defer w.r.Close(dirfd, true)
	w.fds, err = w.r.ListInts(dirfd, w.fds[:0], 0, 1<<31-1)
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(w.fds)
	// Other devices' holders are gathered in the worker's scratch and
	// copied out once, after the NVIDIA ones, since every process holds a
	// few (/dev/null, a tty).
	other := w.otherHolders[:0]
	defer func() { w.otherHolders = other[:0] }()
	var unreadable error // of a ring whose registered files could not all be read
	for _, fd := range w.fds {
		name := strconv.Itoa(fd)
		// readlink comes first, as its text classifies sockets, pipes and
		// anonymous inodes (eventfds, epolls, io_urings), the most of a
		// host's fds, as no device. Only a path can be a device node, under
		// any name (a container's mknod, a bind mount), and on the live
		// procfs its stat decides (fdKind).
		target, err := w.r.ReadlinkBytesAt(dirfd, dir, name)
		var kind snapshot.FileKind
		known := false
		var unnamedErr error
		switch {
		case procfs.RefusedErr(err):
			// The kernel refuses every fd of a process alike (ptrace access).
			return withOther(hs, other), errs, err
		case procfs.VanishedErr(err): // an fd closed since the listing is no news
			continue
		case err != nil && w.live:
			var fate fdFate
			if kind, fate, err = w.fdKind(dirfd, dir, name, err); fate == fdRefused {
				return withOther(hs, other), errs, err
			} else if fate != fdDevice {
				if fate == fdError {
					errs = append(errs, "fd "+strconv.Itoa(fd)+": "+errText(err))
				}
				continue
			}
			known, unnamedErr = true, err // said where the fd is kept, as a tenant can hold 500,000
		case err != nil:
			errs = append(errs, "fd "+strconv.Itoa(fd)+": "+errText(err))
			continue
		case string(target) == ringTarget:
			rhs, rother, rerrs, rerr := w.ringHolders(taskfd, taskDir, fd)
			hs, other, errs = append(hs, rhs...), append(other, rother...), append(errs, rerrs...)
			if rerr != nil {
				unreadable = rerr
			}
			continue
		case len(target) == 0 || target[0] != '/':
			w.noteSocket(target)
			continue // a socket, pipe or anon_inode, as d_path starts every file's path with '/'
		case w.live:
			var fate fdFate
			switch kind, fate, err = w.fdKind(dirfd, dir, name, nil); fate {
			case fdRefused:
				return withOther(hs, other), errs, err
			case fdGone, fdNone:
				continue
			}
			known = fate == fdDevice // else the path rule decides
		}
		path, deleted := procfs.CutDeleted(target)
		if !known && !snapshot.DevicePathRule(path, deleted, false) {
			continue
		}
		h := snapshot.Holder{FD: fd, Target: string(path), Deleted: deleted}
		if known {
			h.DeviceNumber, h.DeviceType = kind.DeviceNumber()
		}
		h.Class, h.GPUMinor = w.classes.Classify(h.Target, kind, known)
		if h.Class != snapshot.ClassNVIDIA {
			// No fdinfo for other devices, since every process holds /dev/null
			// or a tty, and the diff judges only NVIDIA holders by access mode.
			if w.holderRuns.kept(&h) {
				other = append(other, h)
				if unnamedErr != nil {
					errs = append(errs, unnamedDeviceFd(fd, unnamedErr))
				}
			}
			continue
		}
		info, ierr := w.r.ReadWholeAt(taskfd, taskDir, "fdinfo/"+name, w.small)
		w.small = info
		if ierr == nil {
			h.Flags, h.Access, ierr = procfs.ParseFdinfoFlags(info)
		}
		if ierr != nil {
			errs = append(errs, "fdinfo "+strconv.Itoa(fd)+": "+errText(ierr))
		}
		if w.holderRuns.kept(&h) {
			hs = append(hs, h)
			if unnamedErr != nil {
				errs = append(errs, unnamedDeviceFd(fd, unnamedErr))
			}
		}
	}
	return withOther(hs, other), errs, unreadable
}

// withOther is the holders of one fd table, the NVIDIA ones hs, then the
// other devices', copied out of the worker's scratch.
func withOther(hs, other []snapshot.Holder) []snapshot.Holder {
	if len(other) == 0 {
		return hs
	}
	out := make([]snapshot.Holder, 0, len(hs)+len(other))
	return append(append(out, hs...), other...)
}

// fdFate is what stat of an fd link said (fdKind).
type fdFate int

const (
	fdDevice  fdFate = iota // a device node, whose number kind holds
	fdNone                  // a file, a directory, a socket, no device
	fdUnknown               // stat failed otherwise, or an anonymous inode, and the path rule decides
	fdGone                  // closed since the listing
	fdRefused               // refused, as the kernel refuses every fd of a process alike
	fdError                 // readlink failed (linkErr) on what is no device, worth recording
)

// fdKind stats fd name in the fd directory open as dirfd, following the link
// so the type and device number are true even in another mount namespace.
// linkErr is readlink's error (a path past PATH_MAX). A device is then kept
// by its number alone, and an anonymous inode's error recorded.
func (w *worker) fdKind(dirfd int, dir, name string, linkErr error) (snapshot.FileKind, fdFate, error) {
	kind, err := w.r.StatAt(dirfd, dir, name)
	switch {
	case procfs.RefusedErr(err):
		return kind, fdRefused, err
	case procfs.VanishedErr(err):
		return kind, fdGone, err
	case err == nil && kind.Device:
		return kind, fdDevice, linkErr
	case linkErr != nil && (err != nil || kind.Anon):
		return kind, fdError, linkErr
	case linkErr != nil, err == nil && !kind.Anon:
		return kind, fdNone, nil
	}
	return kind, fdUnknown, err
}

// holderRuns applies the mappings' rule to a process's device fds, across its
// own and its threads' tables. Per device node the first MappingsPerDevice
// fds are kept, then only an fd of an access mode not yet kept, and the rest
// are counted in the node's run. This bounds a tenant holding 500,000 fds in
// each of 17 tables.
type holderRuns struct {
	runs procfs.MappingRuns
	id   []byte
}

// kept reports whether h is kept one by one, counting it otherwise.
func (r *holderRuns) kept(h *snapshot.Holder) bool {
	r.id = strconv.AppendUint(append(strconv.AppendUint(r.id[:0], uint64(h.DeviceNumber.Major), 10), ':'), uint64(h.DeviceNumber.Minor), 10)
	if r.runs.Counted(r.id, []byte(h.Target), []byte(h.Access), nil, 0) {
		return false
	}
	r.runs.Keep(r.id, []byte(h.Target), []byte(h.Access), h.Class, h.GPUMinor)
	return true
}

// unnamedDeviceFd is the error of a device fd whose path the kernel could
// not render (longer than PATH_MAX, as a tenant can open a node through a
// path that deep). It is kept with no path. Its device number still
// classifies it, and a tenant must not hide a GPU that way.
func unnamedDeviceFd(fd int, err error) string {
	return "fd " + strconv.Itoa(fd) + ": " + errText(err) + ": kept by its device number, without a path"
}

// maxFdTables bounds the fd tables of one process's threads that are read,
// since a tenant can give each of thousands of threads a table of its own.
const maxFdTables = 16

// errTooManyFdTables says the threads' tables past maxFdTables were not read.
var errTooManyFdTables = fmt.Errorf("threads with more than %d fd tables of their own: the rest were not read", maxFdTables)

// threadHolders reads the device holders of process pid's threads that have
// an fd table of their own (cloned without CLONE_FILES). /proc/PID/fd shows
// only the leader's table (or base's), so a tenant could hide a GPU there.
// kcmp(KCMP_FILES) tells tables apart without reading them, so a thread
// sharing the process's table costs one system call.
func (w *worker) threadHolders(pidfd int, procDir string, pid, base int) (hs []snapshot.Holder, errs []string, err error) {
	if base == 0 {
		base = pid
	}
	taskfd, err := w.r.OpenDirAt(pidfd, procDir, "task")
	if err == nil {
		defer w.r.Close(taskfd, true)
		w.tids, err = w.r.ListInts(taskfd, w.tids[:0], 1, procfs.PIDMax-1)
	}
	switch {
	case err != nil && procfs.VanishedErr(err):
		return nil, nil, nil
	case err != nil:
		return nil, []string{"task: " + errText(err) + ": threads' own fd tables not looked for"}, nil
	}
	var tables []int // a thread of each table read so far
	var unread error
	for _, tid := range w.tids {
		if tid == base || tid == pid {
			continue
		}
		switch same, err := sameFdTable(base, tid); {
		case errors.Is(err, unix.ENOSYS):
			return hs, append(errs, "task fd tables: kcmp is not in this kernel (CONFIG_KCMP): a thread's own fd table was not looked for"), nil
		case err != nil && procfs.RefusedErr(err):
			return hs, errs, err
		case errors.Is(err, unix.ESRCH) && taskGone(taskfd, base):
			// The thread the process is read by ended since, so the rest
			// cannot be compared with it.
			return hs, append(errs, "task fd tables: thread "+strconv.Itoa(base)+", by which the process was read, ended: the other threads' own tables were not compared"), nil
		case err != nil || same:
			continue // the thread is gone, or shares the process's table
		}
		if slices.ContainsFunc(tables, func(t int) bool { same, _ := sameFdTable(t, tid); return same }) {
			continue
		}
		if len(tables) == maxFdTables {
			return hs, errs, errTooManyFdTables
		}
		tables = append(tables, tid)
		dir := procDir + "/task/" + strconv.Itoa(tid)
		tfd, err := w.r.OpenAt(taskfd, strconv.Itoa(tid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, true)
		if err != nil {
			continue // the thread ended since the listing
		}
		ths, terrs, err := w.holders(tfd, dir)
		w.r.Close(tfd, true)
		for i := range ths {
			ths[i].TID = tid
		}
		hs = append(hs, ths...)
		for _, e := range terrs {
			errs = append(errs, threadError(tid, e))
		}
		switch {
		case err != nil && procfs.RefusedErr(err):
			return hs, errs, err
		case err != nil: // a ring's registered files unknown, said once the tables are read
			unread = fmt.Errorf("task %d: %w", tid, err)
		}
	}
	return hs, errs, unread
}

// threadError is an error of a thread's own fd table, naming the thread.
func threadError(tid int, err string) string {
	if tid == 0 {
		return err
	}
	return "task " + strconv.Itoa(tid) + ": " + err
}

// taskGone reports whether the task tid's directory is gone from the
// process's task directory open as taskfd.
func taskGone(taskfd, tid int) bool {
	var st unix.Stat_t
	return errors.Is(unix.Fstatat(taskfd, strconv.Itoa(tid), &st, 0), unix.ENOENT)
}

// sameFdTable reports whether tasks a and b share one fd table, by kcmp
// KCMP_FILES (which needs CONFIG_KCMP, and root or ptrace access to both).
func sameFdTable(a, b int) (bool, error) {
	const kcmpFiles = 2
	r, _, errno := unix.Syscall6(unix.SYS_KCMP, uintptr(a), uintptr(b), kcmpFiles, 0, 0, 0)
	if errno != 0 {
		return false, errno
	}
	return r == 0, nil
}
