package livetest

import (
	"strconv"
	"strings"
)

// ReportFinding returns the line of a text report (diff's or check's, one
// block per process) that gives a finding of kind about pid, and whether
// there is one. That is a line `SEVERITY kind: ...` in the block whose title
// is `pid PID (...)`. The verbose report's `kind: pid PID ...` lines count
// too.
func ReportFinding(report, kind string, pid int) (string, bool) {
	title, verbose := "pid "+strconv.Itoa(pid)+" ", kind+": pid "+strconv.Itoa(pid)+" "
	in := false
	for line := range strings.Lines(report) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.Contains(line, verbose):
			return line, true
		case !strings.HasPrefix(line, " "):
			in = strings.HasPrefix(line, title)
		case in:
			if f := strings.Fields(line); len(f) >= 2 && f[1] == kind+":" {
				return line, true
			}
		}
	}
	return "", false
}
