package kmsg

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/snapshot"
)

// DefaultPath is the kernel's log device.
const DefaultPath = "/dev/kmsg"

// Limits of what one read of a log costs, whatever the log holds.
const (
	// MaxFileSize bounds a file given in place of /dev/kmsg.
	MaxFileSize = 256 << 20
	// MaxWindowRecords bounds the records of one window that are kept.
	// The rest are counted and said to be missing.
	MaxWindowRecords = 100_000
	// deviceRecordMax is the largest record /dev/kmsg returns in one read
	// (the kernel's CONSOLE_EXT_LOG_MAX is 8 KiB).
	deviceRecordMax = 16 << 10
)

// kmsgDevice is /dev/kmsg's device number, 1:11.
const kmsgMajor, kmsgMinor = 1, 11

// source yields the records of a log, oldest first.
type source interface {
	// next returns the next record's first line and dictionary lines
	// (valid until the following call), or io.EOF at the end of the log.
	next() (first []byte, dict [][]byte, long *longText, err error)
	close() error
}

// longText is the length and SHA-256 of a line's text that was cut at MaxText.
type longText struct {
	n   int
	sum string
}

// open opens path, the kernel's log device or a regular file of records,
// read-only and non-blocking. Anything else (a FIFO that would block,
// another device) is refused, since the format is that of /dev/kmsg alone.
func open(path string) (source, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		if unix.Major(st.Rdev) != kmsgMajor || unix.Minor(st.Rdev) != kmsgMinor {
			unix.Close(fd)
			return nil, fmt.Errorf("%s: a device, but not the kernel log (1:11)", path)
		}
		return &deviceSource{fd: fd, buf: make([]byte, deviceRecordMax)}, nil
	case unix.S_IFREG:
		if st.Size > MaxFileSize {
			unix.Close(fd)
			return nil, fmt.Errorf("%s: %d bytes, more than the %d a kernel log file may have", path, st.Size, MaxFileSize)
		}
		f := os.NewFile(uintptr(fd), path)
		return newFileSource(f), nil
	default:
		unix.Close(fd)
		return nil, fmt.Errorf("%s: neither the kernel log device nor a regular file", path)
	}
}

// deviceSource reads /dev/kmsg, one record per read(2). EAGAIN (the
// descriptor is non-blocking) is the end of the log. EPIPE says the next
// record was overwritten before it was read, and the read after it goes on
// with the oldest record left (the gap shows in the sequence numbers).
type deviceSource struct {
	fd   int
	buf  []byte
	dict [][]byte
}

func (d *deviceSource) next() ([]byte, [][]byte, *longText, error) {
	for {
		n, err := unix.Read(d.fd, d.buf)
		switch {
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EPIPE):
			continue
		case errors.Is(err, unix.EAGAIN):
			return nil, nil, nil, io.EOF
		case err != nil:
			return nil, nil, nil, err
		case n == 0:
			return nil, nil, nil, io.EOF
		}
		rec := d.buf[:n]
		first, rest, _ := bytes.Cut(rec, []byte{'\n'})
		d.dict = d.dict[:0]
		for len(rest) > 0 {
			var line []byte
			line, rest, _ = bytes.Cut(rest, []byte{'\n'})
			if len(line) > 0 && line[0] == ' ' {
				d.dict = append(d.dict, line[1:])
			}
		}
		return first, d.dict, nil, nil
	}
}

func (d *deviceSource) close() error { return unix.Close(d.fd) }

// fileBuffer is the size of a file's reads, and of the longest record
// returned in place. A longer one is gathered into buffers of its own.
const fileBuffer = 32 << 10

// fileSource reads a file of records as /dev/kmsg writes them, one after
// another, each a header line followed by its dictionary lines, which start
// with a space. It reads fileBuffer bytes at a time and returns each
// record's lines in place, within its buffer, with no copy and no
// allocation per record.
type fileSource struct {
	f    *os.File
	buf  []byte
	r, w int // buf[r:w] is read from the file and not yet returned
	eof  bool
	dict [][]byte
	// A record longer than buf is gathered here, its first line cut at
	// MaxText plus a header's room, and its dictionary lines.
	first   []byte
	long    longText
	dictBuf []byte
	dictEnd []int
}

func newFileSource(f *os.File) *fileSource {
	return &fileSource{f: f, buf: make([]byte, fileBuffer)}
}

func (s *fileSource) next() ([]byte, [][]byte, *longText, error) {
	for {
		end, fits, err := s.lineEnd(0)
		switch {
		case err != nil:
			return nil, nil, nil, err
		case end == 0 && s.eof && s.r == s.w:
			return nil, nil, nil, io.EOF
		case end == 0 || s.buf[s.r] == ' ':
			// A blank line, or a dictionary line whose record was not a record.
			if err := s.skipLine(func([]byte) {}); err != nil {
				return nil, nil, nil, err
			}
			continue
		case !fits:
			return s.gather()
		}
		// The record's dictionary lines are offsets from s.r, which a read
		// that moves the record to the start of buf leaves valid.
		type span struct{ from, to int }
		var spans [8]span
		dict := spans[:0]
		pos := end + 1
		for {
			ok, err := s.have(pos)
			if err != nil {
				return nil, nil, nil, err
			}
			if !ok {
				if s.eof {
					break
				}
				return s.gather() // the record is longer than buf
			}
			if s.buf[s.r+pos] != ' ' {
				break
			}
			dend, fits, err := s.lineEnd(pos)
			if err != nil {
				return nil, nil, nil, err
			}
			if !fits {
				return s.gather()
			}
			dict = append(dict, span{pos + 1, dend})
			pos = dend + 1
		}
		s.dict = s.dict[:0]
		for _, d := range dict {
			s.dict = append(s.dict, s.buf[s.r+d.from:s.r+d.to])
		}
		first := s.buf[s.r : s.r+end]
		s.consume(pos - 1)
		return first, s.dict, nil, nil
	}
}

// gather reads the record at s.r, longer than buf, into buffers of its own.
func (s *fileSource) gather() ([]byte, [][]byte, *longText, error) {
	const room = MaxText + 256
	first, long, err := s.longLine()
	if err != nil {
		return nil, nil, nil, err
	}
	if long != nil {
		// A text past MaxText keeps no dictionary (see parse).
		return first, nil, long, s.skipDictLines()
	}
	s.dictBuf, s.dictEnd = s.dictBuf[:0], s.dictEnd[:0]
	for {
		ok, err := s.have(0)
		if err != nil {
			return nil, nil, nil, err
		}
		if !ok || s.buf[s.r] != ' ' {
			break
		}
		start, skip := len(s.dictBuf), 1 // the line without its leading space
		err = s.skipLine(func(b []byte) {
			b = b[min(skip, len(b)):]
			skip = 0
			s.dictBuf = append(s.dictBuf, b[:min(len(b), start+room-len(s.dictBuf))]...)
		})
		if err != nil {
			return nil, nil, nil, err
		}
		s.dictEnd = append(s.dictEnd, len(s.dictBuf))
	}
	s.dict = s.dict[:0]
	start := 0
	for _, end := range s.dictEnd {
		s.dict = append(s.dict, s.dictBuf[start:end])
		start = end
	}
	return first, s.dict, nil, nil
}

// consume moves past the line that ends at s.r+end (its newline, or the end of the file).
func (s *fileSource) consume(end int) { s.r = min(s.r+end+1, s.w) }

// lineEnd finds the end of the line at s.r+off (the offset of its newline
// from s.r, or of the end of the file), reading more as needed. It returns
// fits false when the line does not fit in buf with what precedes it from s.r.
func (s *fileSource) lineEnd(off int) (end int, fits bool, err error) {
	scanned := off
	for {
		if i := bytes.IndexByte(s.buf[s.r+scanned:s.w], '\n'); i >= 0 {
			return scanned + i, true, nil
		}
		scanned = s.w - s.r
		if s.eof {
			return scanned, true, nil
		}
		if ok, err := s.fill(); !ok || err != nil {
			return scanned, false, err
		}
	}
}

// have reports whether the byte at s.r+off is read (false at the end of the
// file, or when it does not fit in buf).
func (s *fileSource) have(off int) (bool, error) {
	for s.r+off >= s.w {
		if s.eof {
			return false, nil
		}
		if ok, err := s.fill(); !ok || err != nil {
			return false, err
		}
	}
	return true, nil
}

// fill reads more of the file after buf[s.r:s.w], moving those bytes to the
// start of buf first. It returns false when buf is full.
func (s *fileSource) fill() (bool, error) {
	if s.r > 0 {
		s.w = copy(s.buf, s.buf[s.r:s.w])
		s.r = 0
	}
	if s.w == len(s.buf) {
		return false, nil
	}
	n, err := s.f.Read(s.buf[s.w:])
	s.w += n
	switch {
	case err == io.EOF:
		s.eof = true
	case err != nil:
		return false, err
	}
	return true, nil
}

// longLine reads a line longer than buf (which holds its start, from s.r).
// It keeps MaxText plus a header's room of it. Where it cuts, it counts and
// hashes the line's text (the bytes after the first `;`) to its end.
func (s *fileSource) longLine() ([]byte, *longText, error) {
	const room = MaxText + 256
	s.first = s.first[:0]
	var h hash.Hash
	n, total := 0, 0
	err := s.skipLine(func(b []byte) {
		total += len(b)
		from := 0 // where the text starts in b, once the `;` is found
		if take := min(room-len(s.first), len(b)); take > 0 {
			if h == nil {
				if i := bytes.IndexByte(b[:take], ';'); i >= 0 {
					h, from = sha256.New(), i+1
				}
			}
			s.first = append(s.first, b[:take]...)
		}
		if h != nil {
			h.Write(b[from:])
			n += len(b) - from
		}
	})
	if err != nil || h == nil || total <= room {
		return s.first, nil, err // not cut (parse bounds the text), or no text (parse says so)
	}
	s.long = longText{n: n, sum: hex.EncodeToString(h.Sum(nil))}
	return s.first, &s.long, nil
}

// skipLine reads on to the end of the line at s.r, giving what it passes to seen.
func (s *fileSource) skipLine(seen func([]byte)) error {
	for {
		if i := bytes.IndexByte(s.buf[s.r:s.w], '\n'); i >= 0 {
			seen(s.buf[s.r : s.r+i])
			s.r += i + 1
			return nil
		}
		seen(s.buf[s.r:s.w])
		s.r = s.w
		if s.eof {
			return nil
		}
		if _, err := s.fill(); err != nil {
			return err
		}
	}
}

// skipDictLines reads past the dictionary lines at s.r.
func (s *fileSource) skipDictLines() error {
	for {
		ok, err := s.have(0)
		if err != nil || !ok || s.buf[s.r] != ' ' {
			return err
		}
		if err := s.skipLine(func([]byte) {}); err != nil {
			return err
		}
	}
}

func (s *fileSource) close() error { return s.f.Close() }

// ReadPosition reads where the log at path stands now, its oldest and newest
// sequence numbers (the caller names the boot). It reads every record's
// header, because the device seeks only to the start, the end or the clear
// point, and says nothing of sequence numbers without a read. A log that
// cannot be read gives a position that says why.
func ReadPosition(path string) snapshot.KernelLogPosition {
	pos := snapshot.KernelLogPosition{Source: path}
	src, err := open(path)
	if err != nil {
		pos.Unavailable = unavailable(err)
		return pos
	}
	defer src.close()
	seen := false
	for {
		first, _, _, err := src.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return snapshot.KernelLogPosition{Source: path, Unavailable: unavailable(err)}
		}
		seq, err := parseSeq(first)
		if err != nil {
			continue // not a record, as a file may hold other lines
		}
		if !seen {
			pos.First, seen = seq, true
		}
		pos.Next = max(pos.Next, seq+1)
	}
	return pos
}

// unavailable says why the log could not be read, and what would let it be.
func unavailable(err error) string {
	msg := err.Error()
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
		msg += " (reading the kernel log needs root, or CAP_SYSLOG where kernel.dmesg_restrict is 1)"
	}
	return msg
}
