package procfs

import (
	"bytes"
	"fmt"
)

// /proc/PID/status is "Key:\tvalue" lines. A snapshot keeps two.
//
//	Uid:	1000	1000	1000	1000   (real, effective, saved, filesystem)
//	NSpid:	4242	1                  (host PID first, innermost namespace last)
//
// procfs NewStatus is not used. It re-reads the file into a fresh buffer and
// converts every line to strings, and Capture keeps the raw text anyway.

type Status struct {
	UID, EUID int
	NSpid     []int
	HasUID    bool
}

func ParseStatus(data []byte) (Status, error) {
	var st Status
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		switch {
		case bytes.HasPrefix(line, []byte("Uid:")):
			ids, err := decFields(line[4:], nil)
			if err != nil || len(ids) < 2 {
				return st, fmt.Errorf("bad Uid line %q", line)
			}
			st.UID, st.EUID, st.HasUID = ids[0], ids[1], true
		case bytes.HasPrefix(line, []byte("NSpid:")):
			ids, err := decFields(line[6:], nil)
			if err != nil {
				return st, fmt.Errorf("bad NSpid line %q", line)
			}
			st.NSpid = ids
		}
	}
	if !st.HasUID {
		return st, fmt.Errorf("no Uid line")
	}
	return st, nil
}

// decFields parses whitespace-separated decimal fields.
func decFields(b []byte, out []int) ([]int, error) {
	for f := range bytes.FieldsSeq(b) {
		v, ok := ParseDec(f)
		if !ok || v > 1<<32 {
			return out, fmt.Errorf("bad number %q", f)
		}
		out = append(out, int(v))
	}
	return out, nil
}
