package capture

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/snapshot"
)

// ringTarget is the fd link of an io_uring instance.
const ringTarget = "anon_inode:[io_uring]"

// ringInfoLimit bounds the fdinfo of one ring that is read, as a ring may
// register a million files (about 20 MB of text). Past it, the rest of the
// ring's files are unknown, and the process is said to be unreadable.
const ringInfoLimit = 4 << 20

// ringTries is how often a ring that listed no file of its non-empty
// table is read again before its files count as unknown.
const ringTries = 3

// errRingUnread says a ring's registered files could not all be read.
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
	var files []procfs.RingFile
	for try := 0; ; try++ {
		fd, err := w.r.OpenRead(taskfd, taskDir, name, false)
		if err != nil {
			if procfs.VanishedErr(err) {
				return nil, nil, nil, nil // the ring was closed since the listing
			}
			return nil, nil, nil, fmt.Errorf("%s: fdinfo: %s: %w", what, errText(err), errRingUnread)
		}
		data, full, rerr := w.r.ReadFd(fd, w.ring[:0], ringInfoLimit, false, false)
		w.r.Close(fd, false)
		w.ring = data
		switch {
		case rerr != nil:
			return nil, nil, nil, fmt.Errorf("%s: fdinfo: %s: %w", what, errText(rerr), errRingUnread)
		case full:
			return nil, nil, nil, fmt.Errorf("%s: fdinfo longer than %d bytes: the files past them: %w", what, ringInfoLimit, errRingUnread)
		}
		var ok bool
		if slots, files, ok = procfs.ParseRingFiles(data); !ok {
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
		path, deleted := procfs.CutDeletedString(string(f.Path))
		if !snapshot.DevicePathRule([]byte(path), deleted, false) {
			continue
		}
		slot := f.Slot
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
