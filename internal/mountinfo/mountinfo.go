// Package mountinfo reads the mount table of /proc/PID/mountinfo, which
// tells the filesystem a file lies on without asking that filesystem.
package mountinfo

import (
	"strconv"
	"strings"
)

// Mount is one line of mountinfo (proc_pid_mountinfo(5)), such as
// "36 35 98:0 /a /b rw,noatime master:1 - ext4 /dev/x rw". The kernel
// escapes each field (a space is \040), so a line splits on spaces.
type Mount struct {
	ID     uint64 // the mount's id, as statx's stx_mnt_id gives it
	Dev    string // MAJ:MIN of its filesystem in decimal
	Point  string // where it is mounted, as the process sees it
	Root   string // the directory of its filesystem mounted there
	FSType string // ext4, cgroup2, fuse.sshfs and so on
}

// ParseLine reads one line. It reports false for a line without the " - "
// that ends the optional fields, or without a field before or after it.
func ParseLine(line string) (Mount, bool) {
	pre, post, found := strings.Cut(line, " - ")
	a, b := strings.Fields(pre), strings.Fields(post)
	if !found || len(a) < 5 || len(b) < 1 {
		return Mount{}, false
	}
	id, err := strconv.ParseUint(a[0], 10, 64)
	if err != nil {
		return Mount{}, false
	}
	return Mount{ID: id, Dev: a[2], Root: a[3], Point: a[4], FSType: b[0]}, true
}

// Served reports whether files of a filesystem type are answered by a
// server in user space, to each reader as it likes (FUSE, which is fuse,
// fuse.NAME or fuseblk). A digest of such a file vouches only for what its
// server chose to show, and a read of it waits on the server, which may
// never answer.
func Served(fstype string) bool {
	return fstype == "fuse" || fstype == "fuseblk" || strings.HasPrefix(fstype, "fuse.")
}
