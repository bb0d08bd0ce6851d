package kmsg

import (
	"bufio"
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
)

// DefaultPath is the kernel's log device.
const DefaultPath = "/dev/kmsg"

// Limits of what one read of a log costs, whatever the log holds.
const (
	// MaxFileSize bounds a file given in place of /dev/kmsg.
	MaxFileSize = 256 << 20
	// MaxWindowRecords bounds the records of one window that are kept;
	// the rest are counted and said to be missing.
	MaxWindowRecords = 100_000
	// deviceRecordMax is the largest record /dev/kmsg returns in one read
	// (the kernel's CONSOLE_EXT_LOG_MAX is 8 KiB).
	deviceRecordMax = 16 << 10
)

// kmsgDevice is /dev/kmsg's device number, 1:11.
const kmsgMajor, kmsgMinor = 1, 11

// Position is where a kernel log stood when a snapshot was taken.
type Position struct {
	Source string `json:"source"`            // /dev/kmsg, or the file given with --kmsg
	BootID string `json:"boot_id,omitempty"` // the boot the log belongs to
	First  uint64 `json:"first_seq"`         // the oldest record the log still held
	// Next is the sequence number of the next record to come: the newest
	// record's plus one, 0 for an empty log.
	Next uint64 `json:"next_seq"`
	// Unavailable says why the log could not be read; the other fields are then empty.
	Unavailable string `json:"unavailable,omitempty"`
}

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

// open opens path read-only and non-blocking: the kernel's log device, or a
// regular file of records. Anything else (a FIFO that would block, another
// device) is refused: the format is that of /dev/kmsg alone.
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
		return &fileSource{f: f, r: bufio.NewReaderSize(f, 64<<10)}, nil
	default:
		unix.Close(fd)
		return nil, fmt.Errorf("%s: neither the kernel log device nor a regular file", path)
	}
}

// deviceSource reads /dev/kmsg: one record per read(2). EAGAIN (the
// descriptor is non-blocking) is the end of the log; EPIPE says the next
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

// fileSource reads a file of records as /dev/kmsg writes them, one after
// another: a header line, then its dictionary lines, each starting with a space.
type fileSource struct {
	f       *os.File
	r       *bufio.Reader
	first   []byte
	long    longText
	dictBuf []byte
	dict    [][]byte
}

func (s *fileSource) next() ([]byte, [][]byte, *longText, error) {
	for {
		line, long, err := s.line(&s.first)
		if err != nil {
			return nil, nil, nil, err
		}
		if len(line) == 0 || line[0] == ' ' {
			continue // a blank line, or a dictionary line whose record was not a record
		}
		s.first = line
		s.dictBuf, s.dict = s.dictBuf[:0], s.dict[:0]
		var offsets []int
		for {
			b, err := s.r.Peek(1)
			if err != nil || b[0] != ' ' {
				break
			}
			var d []byte
			d, _, err = s.line(nil)
			if err != nil {
				break
			}
			offsets = append(offsets, len(s.dictBuf))
			s.dictBuf = append(s.dictBuf, d[1:]...)
		}
		for i, off := range offsets {
			end := len(s.dictBuf)
			if i+1 < len(offsets) {
				end = offsets[i+1]
			}
			s.dict = append(s.dict, s.dictBuf[off:end])
		}
		var lt *longText
		if long.n > 0 {
			s.long = long
			lt = &s.long
		}
		return s.first, s.dict, lt, nil
	}
}

// line reads one line without its newline, into *keep when keep is not nil
// (else into a new slice). Past MaxText plus a header's room the rest is not
// kept: it is counted and hashed with the text (the bytes after the first
// ';'), whose length and SHA-256 it returns.
func (s *fileSource) line(keep *[]byte) ([]byte, longText, error) {
	const room = MaxText + 256
	var out []byte
	if keep != nil {
		out = (*keep)[:0]
	}
	var h hash.Hash
	textLen, semi, started := 0, -1, false
	for done := false; !done; {
		chunk, err := s.r.ReadSlice('\n')
		switch {
		case err == nil:
			chunk, done = chunk[:len(chunk)-1], true
		case err == bufio.ErrBufferFull:
		case err == io.EOF:
			if len(chunk) == 0 && !started {
				return nil, longText{}, io.EOF
			}
			done = true
		default:
			return nil, longText{}, err
		}
		started = true
		if semi < 0 {
			if i := bytes.IndexByte(chunk, ';'); i >= 0 {
				semi = len(out) + i
			}
		}
		if h == nil && len(out)+len(chunk) <= room {
			out = append(out, chunk...)
			continue
		}
		if h == nil {
			h = sha256.New()
			if semi >= 0 && semi < len(out) {
				h.Write(out[semi+1:])
				textLen = len(out) - semi - 1
			}
		}
		take := min(room-len(out), len(chunk))
		if semi >= len(out) { // the ';' is in this chunk: hash from after it
			h.Write(chunk[semi-len(out)+1:])
			textLen += len(chunk) - (semi - len(out) + 1)
		} else if semi >= 0 {
			h.Write(chunk)
			textLen += len(chunk)
		}
		out = append(out, chunk[:take]...)
	}
	if keep != nil {
		*keep = out
	}
	if h == nil {
		return out, longText{}, nil
	}
	return out, longText{n: textLen, sum: hex.EncodeToString(h.Sum(nil))}, nil
}

func (s *fileSource) close() error { return s.f.Close() }

// ReadPosition reads where the log at path stands now: its oldest and newest
// sequence numbers (the caller names the boot). It reads every
// record's header (the device seeks only to the start, the end or the
// clear point, and says nothing of sequence numbers without a read); a log
// that cannot be read gives a Position that says why.
func ReadPosition(path string) Position {
	pos := Position{Source: path}
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
			return Position{Source: path, Unavailable: unavailable(err)}
		}
		seq, err := parseSeq(first)
		if err != nil {
			continue // not a record: a file may hold other lines
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
