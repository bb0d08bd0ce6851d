package capture

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/snapshot"
)

// mapsWhole is the size up to which a maps file is read whole, then
// scanned. That is nearly every process's, and all the raw text a snapshot
// keeps (TextLimit).
// A longer one, such as a tenant's 100,000 mappings, is scanned a buffer at a
// time, so memory stays bounded and no buffer is grown and copied.
const mapsWhole = snapshot.TextLimit

// readMaps reads and scans the maps of the process being read. raw is the
// text to keep for a process that uses an NVIDIA device, all of it (newRaw
// cuts it), or, for a text scanned as it was read, its first TextLimit bytes
// with cut naming the whole. procfs.ErrTruncated comes with a result where
// the scan stopped at procfs.MaxFileSize.
func (w *worker) readMaps() (mr procfs.MapsResult, raw []byte, cut *snapshot.Cut, err error) {
	fd, err := w.r.OpenRead(w.dirfd, w.dir, "maps", false)
	if err != nil {
		return mr, nil, nil, err
	}
	defer w.r.Close(fd, false)
	buf, full, err := w.r.ReadFd(fd, w.mapsBuf[:0], mapsWhole, false, false)
	w.mapsBuf = buf
	if err != nil {
		return mr, nil, nil, err
	}
	w.maps.Stat = nil
	if w.live {
		w.maps.Stat = w.mapFilesStat()
	}
	if !full {
		return w.maps.ScanMaps(buf), buf, nil, nil
	}

	w.rawMaps = append(w.rawMaps[:0], buf[:snapshot.TextLimit]...)
	h := sha256.New()
	h.Write(buf)
	total := int64(len(buf))
	skipping := false // inside a line longer than the buffer, whose path is past procfs.PathMax, kept unnamed
	w.maps.Begin()
	for {
		// buf holds whole lines, then the start of one. Scan the former and
		// carry the latter to the front.
		if skipping {
			i := bytes.IndexByte(buf, '\n')
			if i < 0 {
				buf = buf[:0]
			} else {
				buf, skipping = buf[:copy(buf, buf[i+1:])], false
			}
		}
		switch i := bytes.LastIndexByte(buf, '\n'); {
		case i >= 0:
			w.maps.Feed(buf[:i+1])
			buf = buf[:copy(buf, buf[i+1:])]
		case len(buf) == cap(buf):
			w.maps.Feed(buf) // a malformed line as long as the buffer, counted once
			buf, skipping = buf[:0], true
		}
		if total >= procfs.MaxFileSize {
			err = procfs.ErrTruncated
			break
		}
		carried := len(buf)
		buf, full, err = w.r.ReadFd(fd, buf, cap(buf), false, false)
		h.Write(buf[carried:])
		total += int64(len(buf) - carried)
		if err != nil {
			return w.maps.End(), w.rawMaps, nil, err
		}
		if !full { // the end of the file
			if skipping {
				if i := bytes.IndexByte(buf, '\n'); i >= 0 {
					w.maps.Feed(buf[i+1:])
				}
			} else {
				w.maps.Feed(buf)
			}
			break
		}
	}
	w.mapsBuf = buf
	if total <= snapshot.TextLimit && err == nil {
		return w.maps.End(), w.rawMaps, nil, nil // exactly TextLimit bytes, whole, as cutText keeps it
	}
	return w.maps.End(), w.rawMaps, &snapshot.Cut{Length: total, SHA256: hex.EncodeToString(h.Sum(nil)), Partial: err != nil}, err
}
