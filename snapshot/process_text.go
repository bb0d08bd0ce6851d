package snapshot

import (
	"strconv"
	"strings"
)

// ProcessKey writes a process's identity, PID@START, its PID and its start
// time in clock ticks since boot (docs/spec.md, Process identity). Findings,
// maps diffs and bundles name processes by it.
func ProcessKey(pid int, start uint64) string {
	return strconv.Itoa(pid) + "@" + strconv.FormatUint(start, 10)
}

// ParseProcessKey reads a ProcessKey back. It takes decimal digits on both
// sides of the @ and nothing else (no sign, no space, no path element), so a
// key that parses can name a file.
func ParseProcessKey(key string) (pid int, start uint64, ok bool) {
	p, st, found := strings.Cut(key, "@")
	if !found || !digits(p) || !digits(st) {
		return 0, 0, false
	}
	n, err1 := strconv.Atoi(p)
	start, err2 := strconv.ParseUint(st, 10, 64)
	return n, start, err1 == nil && err2 == nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// ExeText is an executable's path as the kernel's exe link shows it, with
// " (deleted)" when the file was deleted after the process started, and ""
// when there is none (a kernel thread, a zombie). The path is as captured,
// so escape it before it reaches a terminal.
func ExeText(exe string, deleted bool) string {
	if exe != "" && deleted {
		return exe + " (deleted)"
	}
	return exe
}

// UserText names the owner of a process by the user name where the capture
// had one, else "uid N".
func UserText(user string, uid int) string {
	if user == "" {
		return "uid " + strconv.Itoa(uid)
	}
	return user
}

// AttributionText names what a process belongs to as a summary line says it,
// "container ID" (shortened as docker ps does), "pod UID", "slurm job ID",
// each only where known.
func AttributionText(containerID, podUID, slurmJobID string) []string {
	var parts []string
	if containerID != "" {
		parts = append(parts, "container "+ShortContainerID(containerID))
	}
	if podUID != "" {
		parts = append(parts, "pod "+podUID)
	}
	if slurmJobID != "" {
		parts = append(parts, "slurm job "+slurmJobID)
	}
	return parts
}

// ShortContainerID shortens a 64-hex container id to 12, as docker ps does.
func ShortContainerID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
