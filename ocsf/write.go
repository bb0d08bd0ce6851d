package ocsf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/gpusnap/gpusnap/internal/safetext"
)

// Write writes the findings as JSON lines, one object a line. A tenant's
// bidi controls are escaped (\u202e), as --json has them.
func Write(w io.Writer, fs []Finding) error {
	b, err := lines(fs)
	if err != nil {
		return err
	}
	_, err = w.Write(b) // lines escaped them
	return err
}

func lines(fs []Finding) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(safetext.JSONWriter(&buf))
	for i := range fs {
		if err := enc.Encode(&fs[i]); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// Append appends the findings to the JSON-lines file at path, created 0600
// when missing, all or none. It writes once under an exclusive flock, and
// cuts back a write that fails part-way, so shippers never read a half batch
// or a torn line. It never writes through a symbolic link, nor to anything
// but a regular file.
func Append(path string, fs []Finding) (err error) {
	if len(fs) == 0 {
		return nil
	}
	b, err := lines(fs)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("--ocsf-file: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("--ocsf-file %s: %w", path, cerr)
		}
	}()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("--ocsf-file %s: not a regular file (%v)", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("--ocsf-file %s: lock: %w", path, err)
	}
	end, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("--ocsf-file %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		if terr := f.Truncate(end); terr != nil {
			return fmt.Errorf("--ocsf-file %s: %w; and the part written could not be cut off: %v", path, err, terr)
		}
		return fmt.Errorf("--ocsf-file %s: %w (nothing appended)", path, err)
	}
	return f.Sync()
}
