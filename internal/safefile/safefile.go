// Package safefile reads files that someone else handed over (keys, allow
// lists, fixtures, bundles). It reads only regular files, up to a size
// limit, opened so that a FIFO or a device in their place cannot block or flood the reader.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ErrNotRegular is wrapped by the error for anything but a regular file.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped by the error for a file over its size limit.
var ErrTooLarge = errors.New("larger than the limit")

// Open opens path for reading and checks that it is a regular file. It opens
// with O_NONBLOCK, so that a FIFO (whose open would wait for a writer) is
// refused at once instead of hanging. Reads of a regular file ignore the flag.
func Open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, TypeName(st.Mode()))
	}
	return f, nil
}

// ReadFile reads the whole of the regular file path, refusing one larger
// than limit bytes before reading any of it (a sparse file of a terabyte
// costs nothing to make and everything to read). The read itself stops at
// limit too, for a file that grows while it is read.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadOpen(f, limit)
}

// ReadOpen is ReadFile of a file the caller opened and checked, within
// limit bytes.
func ReadOpen(f *os.File, limit int64) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %w: %d bytes, at most %d", f.Name(), ErrTooLarge, st.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w: grew past %d bytes while read", f.Name(), ErrTooLarge, limit)
	}
	return data, nil
}

// TypeName names a non-regular file type for an error message.
func TypeName(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a regular file"
}
