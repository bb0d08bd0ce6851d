package procfs

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
)

// /proc/PID/stat is one line, "pid (comm) state ppid pgrp ... starttime ...".
// comm may hold spaces, parentheses and newlines, so it ends at the LAST ')'.
// Fields are numbered from 1 as in proc(5), and starttime is field 22, in
// clock ticks since boot.

// PFKthread is PF_KTHREAD in the flags field. The kernel sets it on its own
// threads only, so no process can pose as one.
const PFKthread = 0x00200000

// PFExiting is PF_EXITING, set once the task has begun to exit (its
// mappings and fds are going or gone).
const PFExiting = 0x00000004

// Stat holds the fields of /proc/PID/stat that a snapshot keeps.
type Stat struct {
	PID       int // field 1, the task's PID, as the reading procfs's pid namespace numbers it
	Comm      string
	State     string // field 3, the kernel's state letter
	PPID      int    // field 4
	PGID      int    // field 5, the process group ID, in the reading procfs's pid namespace
	Session   int    // field 6, the session ID, as the reading procfs's pid namespace numbers it (0 outside it)
	Flags     uint64 // field 9, PF_* of the task
	Threads   int    // field 20, threads in the thread group
	StartTime uint64 // field 22
	// Marks are what an exec replaces (see ExecMarks).
	Marks ExecMarks
}

// ExecMarks are stat's fields 26-28 and 45-51, the addresses of the code,
// stack, data, heap start, arguments and environment. An exec maps a new
// image at a new, randomised stack and prctl(PR_SET_MM) moves them, so
// marks unchanged since the last capture mean neither happened. A reader not
// allowed to ptrace the process reads 0 or 1 (see known).
type ExecMarks [10]uint64

// markField is where stat's field n goes in ExecMarks, or -1.
func markField(n int) int {
	switch {
	case n >= 26 && n <= 28:
		return n - 26
	case n >= 45 && n <= 51:
		return n - 42
	}
	return -1
}

// Known reports whether the marks were read, since the stack and the
// arguments lie at an address no process has at 0 or 1.
func (m ExecMarks) Known() bool {
	return m[2] > 1 && m[6] > 1 && m[7] > m[6]
}

func ParseStat(data []byte) (Stat, error) {
	var st Stat
	open := bytes.IndexByte(data, '(')
	end := bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return st, fmt.Errorf("no (comm) in %q", Truncate(data, 64))
	}
	st.Comm = string(data[open+1 : end])
	if pid, err := strconv.Atoi(string(bytes.TrimSpace(data[:open]))); err == nil {
		st.PID = pid
	}
	rest := bytes.TrimRight(data[end+1:], "\n")
	// Fields 3.. follow, space-separated, walked to 51 without splitting.
	field := 2
	for len(rest) > 0 && field < 51 {
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
		case 5:
			v, err := statNumber(val, "pgrp", 1<<31)
			if err != nil {
				return st, err
			}
			st.PGID = int(v)
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
		default:
			if i := markField(field); i >= 0 {
				st.Marks[i], _ = ParseDec(val) // a mark unparsed is 0, unknown
			}
		}
	}
	if field < 22 {
		return st, fmt.Errorf("stat has %d fields, want at least 22", field)
	}
	return st, nil
}

// statNumber parses one decimal field of stat, at most limit.
func statNumber(val []byte, name string, limit uint64) (uint64, error) {
	v, ok := ParseDec(val)
	if !ok || v > limit {
		return 0, fmt.Errorf("bad %s %q", name, val)
	}
	return v, nil
}

// truncate shortens b for an error message.
func Truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
