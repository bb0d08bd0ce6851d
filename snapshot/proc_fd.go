package snapshot

import (
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
func (w *worker) holders(pid int) (hs []Holder, errs []string, err error) {
	dir := pidPath(w.root, pid, "fd")
	w.fds, err = w.r.readDirInts(dir, w.fds[:0])
	if err != nil {
		return nil, nil, err
	}
	var other []Holder
	for _, fd := range w.fds {
		link := dir + "/" + strconv.Itoa(fd)
		target, err := w.r.readlink(link)
		switch {
		case refusedErr(err):
			// The kernel refuses every fd of a process alike (ptrace access).
			return append(hs, other...), errs, err
		case vanishedErr(err): // an fd closed since the listing is no news
			continue
		case err != nil:
			errs = append(errs, "fd "+strconv.Itoa(fd)+": "+errText(err))
			continue
		}
		if !strings.HasPrefix(target, "/") {
			continue // socket, pipe, anon_inode
		}
		path, deleted := cutDeletedString(target)
		kind, serr := w.r.stat(link)
		known := serr == nil
		if known && !kind.Device || !known && !devicePathRule([]byte(path), deleted, false) {
			continue
		}
		h := Holder{FD: fd, Target: path, Deleted: deleted}
		if known {
			h.DeviceNumber, h.DeviceType = deviceNumber(kind)
		}
		h.Class, h.GPUMinor = w.classes.classify(path, kind, known)
		info, ierr := w.r.readFile(pidPath(w.root, pid, "fdinfo/"+strconv.Itoa(fd)), w.small)
		w.small = info
		if ierr == nil {
			h.Flags, h.Access, ierr = parseFdinfoFlags(info)
		}
		if ierr != nil {
			errs = append(errs, "fdinfo "+strconv.Itoa(fd)+": "+errText(ierr))
		}
		if h.Class == ClassNVIDIA {
			hs = append(hs, h)
		} else {
			other = append(other, h)
		}
	}
	return append(hs, other...), errs, nil
}

func cutDeletedString(s string) (string, bool) {
	if strings.HasSuffix(s, " (deleted)") {
		return s[:len(s)-len(" (deleted)")], true
	}
	return s, false
}
