package capture

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
)

// /proc/PID/stat is one line: "pid (comm) state ppid pgrp ... starttime ...".
// comm may hold spaces, parentheses and newlines, so it ends at the LAST ')'.
// Fields are numbered from 1 as in proc(5); starttime is field 22, in clock
// ticks since boot.

// pfKthread is PF_KTHREAD in the flags field: set by the kernel on its own
// threads only, so no process can pose as one.
const pfKthread = 0x00200000

// pfExiting is PF_EXITING: the task has begun to exit (its mappings and
// fds are going or gone).
const pfExiting = 0x00000004

// procStat holds the fields of /proc/PID/stat that a snapshot keeps.
type procStat struct {
	PID       int // field 1: the task's PID, as the reading procfs's pid namespace numbers it
	Comm      string
	State     string // field 3: the kernel's state letter
	PPID      int    // field 4
	Session   int    // field 6: the session ID, as the reading procfs's pid namespace numbers it (0 outside it)
	Flags     uint64 // field 9: PF_* of the task
	Threads   int    // field 20: threads in the thread group
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
	if pid, err := strconv.Atoi(string(bytes.TrimSpace(data[:open]))); err == nil {
		st.PID = pid
	}
	rest := bytes.TrimRight(data[end+1:], "\n")
	// Fields 3.. follow, space-separated; walk to 22 without splitting.
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
			if len(val) != 1 || val[0]|0x20 < 'a' || val[0]|0x20 > 'z' {
				return st, fmt.Errorf("bad state %q", val)
			}
			st.State = string(val)
		case 4:
			v, err := statNumber(val, "ppid", 1<<31)
			if err != nil {
				return st, err
			}
			st.PPID = int(v)
		case 6:
			v, err := statNumber(val, "session", 1<<31)
			if err != nil {
				return st, err
			}
			st.Session = int(v)
		case 9:
			v, err := statNumber(val, "flags", math.MaxUint64)
			if err != nil {
				return st, err
			}
			st.Flags = v
		case 20:
			v, err := statNumber(val, "num_threads", 1<<31)
			if err != nil {
				return st, err
			}
			st.Threads = int(v)
		case 22:
			v, err := statNumber(val, "starttime", math.MaxUint64)
			if err != nil {
				return st, err
			}
			st.StartTime = v
		}
	}
	if field < 22 {
		return st, fmt.Errorf("stat has %d fields, want at least 22", field)
	}
	return st, nil
}

// statNumber parses one decimal field of stat, at most limit.
func statNumber(val []byte, name string, limit uint64) (uint64, error) {
	v, ok := parseDec(val)
	if !ok || v > limit {
		return 0, fmt.Errorf("bad %s %q", name, val)
	}
	return v, nil
}

// truncate shortens b for an error message.
func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
