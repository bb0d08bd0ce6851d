package snapshot

import (
	"slices"
	"strconv"
	"strings"
)

// /proc/PID/fd/N is a link to what fd N has open: a path for files and device
// nodes, "socket:[ino]", "pipe:[ino]" or "anon_inode:..." otherwise. stat of
// the link follows it to the open file itself, so its file type and device
// number are the truth even when the path names a node in another mount
// namespace (a container's /dev/nvidia0).
//
// procfs FileDescriptorTargets is not used: it drops the fd numbers, and
// returns "" for a link it could not read, which hides a refusal.

// holders reads the fd directory of a process and returns its device holders.
// err is the error of listing the directory or a refusal of its links; errs
// are per-fd errors worth recording.
func (w *worker) holders() (hs []Holder, errs []string, err error) {
	dir := w.dir + "/fd"
	dirfd, err := w.r.openDirAt(w.dirfd, w.dir, "fd")
	if err != nil {
		return nil, nil, err
	}
	defer w.r.close(dirfd, true)
	w.fds, err = w.r.listInts(dirfd, w.fds[:0], 0, 1<<31-1)
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(w.fds)
	var other []Holder
	for _, fd := range w.fds {
		name := strconv.Itoa(fd)
		// On the live procfs, stat first: it is cheaper than readlink (no
		// path to render) and most fds (sockets, pipes, files) end there.
		var kind FileKind
		known := false
		if w.live {
			var err error
			kind, err = w.r.statAt(dirfd, dir, name)
			switch {
			case refusedErr(err):
				// The kernel refuses every fd of a process alike (ptrace access).
				return append(hs, other...), errs, err
			case vanishedErr(err): // an fd closed since the listing is no news
				continue
			case err == nil && !kind.Device:
				continue
			}
			known = err == nil
		}
		target, err := w.r.readlinkAt(dirfd, dir, name)
		switch {
		case refusedErr(err):
			return append(hs, other...), errs, err
		case vanishedErr(err):
			continue
		case err != nil && known:
			errs = append(errs, unnamedDeviceFd(fd, err))
		case err != nil:
			errs = append(errs, "fd "+strconv.Itoa(fd)+": "+errText(err))
			continue
		case !strings.HasPrefix(target, "/"):
			continue // socket, pipe, anon_inode
		}
		path, deleted := cutDeletedString(target)
		if !known && !devicePathRule([]byte(path), deleted, false) {
			continue
		}
		h := Holder{FD: fd, Target: path, Deleted: deleted}
		if known {
			h.DeviceNumber, h.DeviceType = deviceNumber(kind)
		}
		h.Class, h.GPUMinor = w.classes.Classify(path, kind, known)
		if h.Class != ClassNVIDIA {
			// No fdinfo for other devices: every process holds /dev/null or a
			// tty, and the diff judges only NVIDIA holders by access mode.
			other = append(other, h)
			continue
		}
		info, ierr := w.r.readWholeAt(w.dirfd, w.dir, "fdinfo/"+name, w.small)
		w.small = info
		if ierr == nil {
			h.Flags, h.Access, ierr = parseFdinfoFlags(info)
		}
		if ierr != nil {
			errs = append(errs, "fdinfo "+strconv.Itoa(fd)+": "+errText(ierr))
		}
		hs = append(hs, h)
	}
	return append(hs, other...), errs, nil
}

// unnamedDeviceFd is the error of a device fd whose path the kernel could
// not render (longer than PATH_MAX: a tenant can open a node through a
// path that deep). It is kept, with no path: its device number still
// classifies it, and a tenant must not hide a GPU that way.
func unnamedDeviceFd(fd int, err error) string {
	return "fd " + strconv.Itoa(fd) + ": " + errText(err) + ": kept by its device number, without a path"
}

func cutDeletedString(s string) (string, bool) {
	if strings.HasSuffix(s, " (deleted)") {
		return s[:len(s)-len(" (deleted)")], true
	}
	return s, false
}
