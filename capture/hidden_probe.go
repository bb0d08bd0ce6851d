package capture

import (
	"errors"
	"strconv"
	"strings"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/internal/mountinfo"
	"github.com/gpusnap/gpusnap/snapshot"
	"golang.org/x/sys/unix"
)

// hiddenProbe decides whether pid, listed in the proc root but whose
// directory read as no process (shown says how), is still the kernel's. It
// pins the PID with pidfd_open, rereads stat, and signals 0 through the pidfd
// to tell a reaped process from a live one. A PID that now reads as a process
// is left to the next listing.
func (cfg *scanConfig) hiddenProbe(r *procfs.Reader, pid int, shown string) (why string, hidden bool) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	how := "pidfd_open succeeds"
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return "", false // exited and reaped, so vanished, as it looked
		}
		// Without pidfd_open (before Linux 5.3, or under seccomp), kill 0 asks the same.
		if errors.Is(unix.Kill(pid, 0), unix.ESRCH) {
			return "", false
		}
		pidfd, how = -1, "kill(pid, 0) is not ESRCH (pidfd_open: "+errText(err)+")"
	} else {
		defer unix.Close(pidfd)
	}
	name := strconv.Itoa(pid)
	if cfg.readsAsProcess(r, name) {
		return "", false
	}
	if pidfd >= 0 {
		if errors.Is(unix.PidfdSendSignal(pidfd, 0, nil, 0), unix.ESRCH) {
			return "", false // it exited after pidfd_open, and its directory went with it
		}
	} else if errors.Is(unix.Kill(pid, 0), unix.ESRCH) {
		return "", false
	}
	return cfg.root + "/" + name + " " + shown + ", yet " + how + ": the kernel still has the process", true
}

// readsAsProcess reports whether root/name is a directory of the proc
// root's own filesystem whose stat parses and names PID name, a process as
// /proc shows one (a bind mount of another process's directory names that one).
func (cfg *scanConfig) readsAsProcess(r *procfs.Reader, name string) bool {
	fd, err := r.OpenAt(cfg.rootfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, true)
	if err != nil {
		return false
	}
	defer r.Close(fd, true)
	if cfg.otherFS(fd) != "" {
		return false
	}
	data, err := r.ReadTaskFileAt(fd, cfg.root+"/"+name, "stat", make([]byte, 0, 1024))
	if err != nil {
		return false
	}
	st, err := procfs.ParseStat(data)
	return err == nil && strconv.Itoa(st.PID) == name
}

// otherFS says how the directory open as fd lies on another filesystem
// than the proc root (something mounted over /proc/PID), or "" when it lies
// on the root's own, as every process directory of a procfs does. It looks
// only on the live procfs, as a tree's directories may lie anywhere.
func (cfg *scanConfig) otherFS(fd int) string {
	if !cfg.live {
		return ""
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Dev == cfg.rootDev {
		return ""
	}
	return "is a mount of another filesystem (device " + strconv.FormatUint(uint64(unix.Major(st.Dev)), 10) + ":" +
		strconv.FormatUint(uint64(unix.Minor(st.Dev)), 10) + ") over the process's directory"
}

// hidden records res, a listed PID whose directory read as no process, in
// scan.Hidden where the kernel still has the process, and reports whether
// it did. On another pid namespace's procfs nothing can be probed, so a
// mount over a directory there is said in scan.Errors.
func (cfg *scanConfig) hidden(r *procfs.Reader, res result, scan *snapshot.Scan) bool {
	shown := res.hidden
	if shown == "" {
		shown = "reads as no process (no stat in it)"
	}
	if !cfg.ownPIDs {
		if res.hidden != "" {
			scan.Errors = append(scan.Errors, procfs.PIDDir(cfg.root, res.p.PID)+" "+shown+": not read, and not probed (a PID of another pid namespace)")
		}
		return false
	}
	why, ok := cfg.hiddenProbe(r, res.p.PID, shown)
	if !ok {
		return false
	}
	scan.Hidden = append(scan.Hidden, snapshot.HiddenProcess{PID: res.p.PID, StartTime: res.p.StartTime, Comm: res.p.Comm, Why: why})
	return true
}

// ownDir opens root/name (O_PATH) for reading the process's files and says
// how it is not the process's own directory. It may lie on another
// filesystem than the proc root (otherFS), or on the live procfs its stat
// may name another PID. It returns -1 and "" where the directory cannot be
// opened (the process is gone). On the live procfs an open that refuses to
// cross a mount (RESOLVE_NO_XDEV) proves the directory the process's own at
// the cost of that open, and only a directory with a mount over it is
// looked at further.
func (cfg *scanConfig) ownDir(r *procfs.Reader, name string) (int, string) {
	if cfg.live && !r.NoOpenat2 {
		fd, err := r.OpenNoXdev(cfg.rootfd, name)
		if err == nil {
			return fd, ""
		}
		if !errors.Is(err, unix.EXDEV) && !r.NoOpenat2 {
			return -1, ""
		}
	}
	fd, err := r.OpenAt(cfg.rootfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, true)
	if err != nil {
		return -1, ""
	}
	if why := cfg.otherFS(fd); why != "" || !cfg.live {
		return fd, why
	}
	// The same procfs can be bound there too, as another process's
	// directory, whose stat names that process.
	data, err := r.ReadTaskFileAt(fd, cfg.root+"/"+name, "stat", make([]byte, 0, 512))
	if err != nil {
		return fd, ""
	}
	if st, err := procfs.ParseStat(data); err == nil && strconv.Itoa(st.PID) != name {
		return fd, boundOver(st.PID)
	}
	return fd, ""
}

// boundOver says that a process's directory reads as process other's, a
// directory of the same procfs bound over it.
func boundOver(other int) string {
	return "reads as process " + strconv.Itoa(other) + " (a directory bound over the process's)"
}

// The BPF path's fill-in reads a few files of every process (its exe link,
// mostly), and proving each directory its own (ownDir) cost as much as those
// reads. A read lands in the process's own directory without that proof
// where no mount lies under any process directory of the capture's mount
// namespace and none is made or removed until the reads are done. mountinfo
// says the first, and its poll the second, as the kernel marks an open
// mountinfo on every mount and unmount in its namespace, one made and removed
// again included (docs/snapshot.md, the BPF path's fill-in).

// mountWatch is the capture's mountinfo, open since before the reads it
// vouches for.
type mountWatch struct{ fd int }

// mountInfoLimit bounds the mountinfo read. A namespace with a larger table
// has every directory proven.
const mountInfoLimit = 4 << 20

// errMountsMoved says a mount was made or removed while the fill-in read
// without proving directories, so those reads prove nothing.
var errMountsMoved = errors.New("a mount was made or removed during the fill-in")

// watchMounts opens the capture's mountinfo and returns its watch where no
// mount point lies under a process directory of the proc root, else nil, as
// where mountinfo cannot be read whole: every directory is then proven.
func (cfg *scanConfig) watchMounts() *mountWatch {
	fd, err := unix.Open(cfg.root+"/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	m := &mountWatch{fd: fd}
	var data []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || len(data)+n > mountInfoLimit {
			m.close()
			return nil
		}
		if n == 0 {
			break
		}
		data = append(data, buf[:n]...)
	}
	for line := range strings.Lines(string(data)) {
		mnt, ok := mountinfo.ParseLine(strings.TrimSuffix(line, "\n"))
		if !ok || underProcessDir(mnt.Point, cfg.root) {
			m.close()
			return nil
		}
	}
	return m
}

// underProcessDir says whether mount point mp is a process directory of the
// proc root, or lies within one.
func underProcessDir(mp, root string) bool {
	rest, ok := strings.CutPrefix(mp, root+"/")
	return ok && rest != "" && rest[0] >= '0' && rest[0] <= '9'
}

// moved says whether a mount was made or removed in the namespace since the
// watch was opened, or whether the poll that asks failed.
func (m *mountWatch) moved() bool {
	fds := []unix.PollFd{{Fd: int32(m.fd), Events: unix.POLLPRI}}
	for {
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		return err != nil || n != 0
	}
}

// close closes the watch, if any.
func (m *mountWatch) close() {
	if m != nil {
		unix.Close(m.fd)
	}
}
