package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// /proc/PID/fdinfo/FD holds the open(2) flags in octal, "flags:\t0100002",
// among other lines. Their O_ACCMODE bits say how the fd was opened, 0 for
// read, 1 for write and 2 for read-write.

// ParseFdinfoFlags returns the octal flags text and the access mode.
func ParseFdinfoFlags(data []byte) (flags, access string, err error) {
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		rest, ok := bytes.CutPrefix(line, []byte("flags:"))
		if !ok {
			continue
		}
		text := string(bytes.TrimSpace(rest))
		v, err := strconv.ParseUint(text, 8, 64)
		if err != nil {
			return "", "", fmt.Errorf("bad flags %q", text)
		}
		access, err = AccessMode(v)
		if err != nil {
			return text, "", fmt.Errorf("flags %q have no valid access mode", text)
		}
		return text, access, nil
	}
	return "", "", fmt.Errorf("no flags line")
}

// AccessMode is r, w or rw from the O_ACCMODE bits of open(2) flags, as
// fdinfo and the capture name a holder's access. watch names an open so.
func AccessMode(flags uint64) (string, error) {
	switch flags & 3 { // O_ACCMODE
	case 0:
		return "r", nil
	case 1:
		return "w", nil
	case 2:
		return "rw", nil
	}
	return "", errors.New("no valid access mode")
}
