package procfs

import (
	"bytes"
	"strconv"
)

// The fdinfo of an io_uring fd (io_uring/fdinfo.c) lists the ring's
// registered files, one line per slot, paths escaped as by seq_file_path.
//
//	UserFiles:	3
//	    0: /dev/nvidia0
//	    2: /dev/null
//
// Such a file has no fd of its own, so /proc/PID/fd shows only the ring. A
// ring busy in another thread (its lock not free) lists no file.

// RingFile is one registered file of a ring's fdinfo.
type RingFile struct {
	Slot int
	Path []byte // unescaped, " (deleted)" included
}

// ParseRingFiles returns the slot count of the UserFiles line and the
// files listed after it. ok says there was such a line.
func ParseRingFiles(data []byte) (slots int, files []RingFile, ok bool) {
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
		files = append(files, RingFile{Slot: slot, Path: unescapeOctal(path)})
	}
	return slots, files, ok
}

// unescapeOctal undoes seq_file's escaping of a path, where a backslash
// and three octal digits stand for one byte.
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
