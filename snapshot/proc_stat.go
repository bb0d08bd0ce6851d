package snapshot

import (
	"bytes"
	"fmt"
)

// /proc/PID/stat is one line: "pid (comm) state ppid pgrp ... starttime ...".
// comm may hold spaces, parentheses and newlines, so it ends at the LAST ')'.
// Fields are numbered from 1 as in proc(5); starttime is field 22, in clock
// ticks since boot.

// procStat holds the fields of /proc/PID/stat that a snapshot keeps.
type procStat struct {
	Comm      string
	State     byte   // field 3
	PPID      int    // field 4
	StartTime uint64 // field 22
}

func parseStat(data []byte) (procStat, error) {
	var st procStat
	open := bytes.IndexByte(data, '(')
	end := bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return st, fmt.Errorf("no (comm) in %q", truncate(data, 64))
	}
	st.Comm = string(data[open+1 : end])
	rest := bytes.TrimRight(data[end+1:], "\n")
	// Fields 3.. follow, space-separated; walk to 4 and 22 without splitting.
	field := 2
	for len(rest) > 0 && field < 22 {
		if rest[0] != ' ' {
			return st, fmt.Errorf("malformed stat after comm")
		}
		rest = rest[1:]
		field++
		val := rest
		if i := bytes.IndexByte(rest, ' '); i >= 0 {
			val, rest = rest[:i], rest[i:]
		} else {
			rest = nil
		}
		switch field {
		case 3:
			if len(val) != 1 {
				return st, fmt.Errorf("bad state %q", val)
			}
			st.State = val[0]
		case 4:
			v, ok := parseDec(val)
			if !ok || v > 1<<31 {
				return st, fmt.Errorf("bad ppid %q", val)
			}
			st.PPID = int(v)
		case 22:
			v, ok := parseDec(val)
			if !ok {
				return st, fmt.Errorf("bad starttime %q", val)
			}
			st.StartTime = v
		}
	}
	if field < 22 {
		return st, fmt.Errorf("stat has %d fields, want at least 22", field)
	}
	return st, nil
}

// truncate shortens b for an error message.
func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
