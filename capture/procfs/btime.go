package procfs

import (
	"bytes"
	"errors"
)

// ParseBtime finds the "btime SECONDS" line of /proc/stat (proc(5)), the
// boot time in seconds since the epoch.
func ParseBtime(data []byte) (int64, error) {
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			n, ok := ParseDec(bytes.TrimSpace(v))
			if !ok || n > 1<<40 {
				return 0, errors.New("bad btime line")
			}
			return int64(n), nil
		}
	}
	return 0, errors.New("no btime line")
}
