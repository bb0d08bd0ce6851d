package capture

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/gpusnap/gpusnap/snapshot"
)

// The fdinfo of an io_uring fd (io_uring/fdinfo.c) lists the ring's
// registered files, one line per slot, paths escaped as by seq_file_path:
//
//	UserFiles:	3
//	    0: /dev/nvidia0
//	    2: /dev/null
//
// Such a file has no fd of its own, so /proc/PID/fd shows only the ring. A
// ring busy in another thread (its lock not free) lists no file.

// ringTarget is the fd link of an io_uring instance.
const ringTarget = "anon_inode:[io_uring]"

// ringInfoLimit bounds the fdinfo of one ring that is read: a ring may
// register a million files (about 20 MB of text). Past it, the rest of the
// ring's files are unknown, and the process is said to be unreadable.
const ringInfoLimit = 4 << 20

// ringTries is how often a ring that listed no file of its non-empty
// table is read again before its files count as unknown.
const ringTries = 3

// ringFile is one registered file of a ring's fdinfo.
type ringFile struct {
	slot int
	path []byte // unescaped, " (deleted)" included
}

// parseRingFiles returns the slot count of the UserFiles line (ok: there
// was one) and the files listed after it.
func parseRingFiles(data []byte) (slots int, files []ringFile, ok bool) {
	in := false
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		if !in {
			rest, found := bytes.CutPrefix(line, []byte("UserFiles:"))
			if !found {
				continue
			}
			n, err := strconv.Atoi(string(bytes.TrimSpace(rest)))
			if err != nil {
				return 0, nil, false
			}
			slots, in, ok = n, true, true
			continue
		}
		num, path, found := bytes.Cut(bytes.TrimLeft(line, " "), []byte(": "))
		slot, err := strconv.Atoi(string(num))
		if !found || err != nil {
			break // the next section (UserBufs:)
		}
		files = append(files, ringFile{slot: slot, path: unescapeOctal(path)})
	}
	return slots, files, ok
}

// unescapeOctal undoes seq_file's escaping of a path: a backslash and three
// octal digits stand for one byte.
func unescapeOctal(b []byte) []byte {
	if bytes.IndexByte(b, '\\') < 0 {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' && i+3 < len(b) && isOctal(b[i+1:i+4]) {
			out = append(out, (b[i+1]-'0')<<6|(b[i+2]-'0')<<3|(b[i+3]-'0'))
			i += 3
			continue
		}
		out = append(out, b[i])
	}
	return out
}

func isOctal(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '7' {
			return false
		}
	}
	return len(b) == 3
}

// errRingUnread: a ring's registered files could not all be read.
var errRingUnread = errors.New("registered files unknown")

// ringHolders returns the device holders among the registered files of
// io_uring ringfd in task taskfd, NVIDIA ones in hs and others in other. A
// ring shows neither device number nor access mode, so the path rule
// classifies each file and an NVIDIA one is taken as read-write, as errs say.
// err means the process's fds are not known in full.
func (w *worker) ringHolders(taskfd int, taskDir string, ringfd int) (hs, other []snapshot.Holder, errs []string, err error) {
	name := "fdinfo/" + strconv.Itoa(ringfd)
	what := "fd " + strconv.Itoa(ringfd) + " (io_uring)"
	var slots int
	var files []ringFile
	for try := 0; ; try++ {
		fd, err := w.r.openRead(taskfd, taskDir, name, false)
		if err != nil {
			if vanishedErr(err) {
				return nil, nil, nil, nil // the ring was closed since the listing
			}
			return nil, nil, nil, fmt.Errorf("%s: fdinfo: %s: %w", what, errText(err), errRingUnread)
		}
		data, full, rerr := w.r.readFd(fd, w.ring[:0], ringInfoLimit, false, false)
		w.r.close(fd, false)
		w.ring = data
		switch {
		case rerr != nil:
			return nil, nil, nil, fmt.Errorf("%s: fdinfo: %s: %w", what, errText(rerr), errRingUnread)
		case full:
			return nil, nil, nil, fmt.Errorf("%s: fdinfo longer than %d bytes: the files past them: %w", what, ringInfoLimit, errRingUnread)
		}
		var ok bool
		if slots, files, ok = parseRingFiles(data); !ok {
			return nil, nil, nil, fmt.Errorf("%s: fdinfo has no UserFiles count (a format this capture does not know): %w", what, errRingUnread)
		}
		if slots == 0 || len(files) > 0 {
			break
		}
		if try == ringTries-1 {
			return nil, nil, nil, fmt.Errorf("%s: %d registered file slots, none listed in %d reads (the ring's lock was held, or every slot is empty): %w", what, slots, ringTries, errRingUnread)
		}
	}
	nvidia := 0
	for _, f := range files {
		path, deleted := cutDeletedString(string(f.path))
		if !snapshot.DevicePathRule([]byte(path), deleted, false) {
			continue
		}
		slot := f.slot
		h := snapshot.Holder{FD: ringfd, RingSlot: &slot, Target: path, Deleted: deleted}
		h.Class, h.GPUMinor = w.classes.Classify(path, snapshot.FileKind{}, false)
		if h.Class == snapshot.ClassNVIDIA {
			h.Access = "rw"
		}
		if !w.holderRuns.kept(&h) {
			continue
		}
		if h.Class == snapshot.ClassNVIDIA {
			nvidia++
			hs = append(hs, h)
		} else {
			other = append(other, h)
		}
	}
	if nvidia > 0 {
		errs = append(errs, fmt.Sprintf("%s: %d registered NVIDIA device files, classified by path and taken as open read-write: a ring shows neither their device numbers nor their access modes", what, nvidia))
	}
	return hs, other, errs, nil
}
