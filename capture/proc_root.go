package capture

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/snapshot"
	"golang.org/x/sys/unix"
)

// ProcRoot is a proc root held open between captures, for gpusnap watch. What
// it reads goes through the capture's own reader and its rules, in a tree
// only regular files of bounded size beneath the root, never through a
// symbolic link, and only canonical PIDs ("04242" is none).
type ProcRoot struct {
	cfg *scanConfig
	// Errs say what opening it could not read (its devices file...).
	Errs []string

	mu  sync.Mutex // r and buf serve one point read at a time
	r   *procfs.Reader
	buf []byte
}

// OpenProcRoot opens the proc root root ("" is /proc) and reads its host
// and device classes. Close it when done.
func OpenProcRoot(root string) (*ProcRoot, error) {
	if root == "" {
		root = "/proc"
	}
	var h snapshot.Host
	cfg, r, errs, err := openScan(root, nil, &h)
	if err != nil {
		return nil, err
	}
	return &ProcRoot{cfg: cfg, Errs: errs, r: r}, nil
}

// Close releases the root.
func (p *ProcRoot) Close() error { return unix.Close(p.cfg.rootfd) }

// Classes are the device classes its devices file gives.
func (p *ProcRoot) Classes() snapshot.DeviceClasses { return p.cfg.classes }

// PIDs lists its processes.
func (p *ProcRoot) PIDs() ([]int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.r.ListPIDs(p.cfg.rootfd)
}

// Processes reads the processes pids as Capture reads each, and leaves out
// those that are gone. watch's fallback rescans new processes and those
// using a device with it, not the whole host.
func (p *ProcRoot) Processes(ctx context.Context, pids []int) ([]snapshot.Process, error) {
	results, err := p.cfg.scan(ctx, pids)
	if err != nil {
		return nil, err
	}
	out := make([]snapshot.Process, 0, len(results))
	for _, res := range results {
		if !res.vanished {
			makeValidUTF8(&res.p)
			out = append(out, res.p)
		}
	}
	return out, nil
}

// Exe reads the exe of pid, and ok only while pid still has the start time
// start (stat's field 22), since a PID reused since names another program.
func (p *ProcRoot) Exe(pid int, start uint64) (exe string, deleted, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ok = p.inPID(pid, func(dirfd int, dir string) bool {
		var err error
		if exe, err = p.r.ReadlinkAt(dirfd, dir, "exe"); err != nil {
			return false
		}
		st, ok := p.statAt(dirfd, dir)
		return ok && st.StartTime == start
	})
	if !ok {
		return "", false, false
	}
	exe, deleted = strings.CutSuffix(exe, " (deleted)")
	return exe, deleted, true
}

// StartTime reads pid's start time (stat's field 22), the second half of
// its identity. ok is false when pid is gone or its stat cannot be read.
func (p *ProcRoot) StartTime(pid int) (start uint64, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ok = p.inPID(pid, func(dirfd int, dir string) bool {
		st, ok := p.statAt(dirfd, dir)
		start = st.StartTime
		return ok
	})
	return start, ok
}

// inPID runs fn on pid's directory, held open, and returns false when it
// cannot be opened. The caller holds mu.
func (p *ProcRoot) inPID(pid int, fn func(dirfd int, dir string) bool) bool {
	dirfd, err := p.r.OpenAt(p.cfg.rootfd, strconv.Itoa(pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, true)
	if err != nil {
		return false
	}
	defer p.r.Close(dirfd, true)
	return fn(dirfd, procfs.PIDDir(p.cfg.root, pid))
}

// statAt reads and parses the stat of the process whose directory is open.
func (p *ProcRoot) statAt(dirfd int, dir string) (procfs.Stat, bool) {
	var err error
	if p.buf, err = p.r.ReadTaskFileAt(dirfd, dir, "stat", p.buf); err != nil {
		return procfs.Stat{}, false
	}
	st, err := procfs.ParseStat(p.buf)
	return st, err == nil
}

// TicksOf turns a kernel start_boottime in nanoseconds into stat's clock
// ticks, the start time of a process identity.
func TicksOf(ns uint64) uint64 { return ns / nsecPerTick }
