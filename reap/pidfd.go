package reap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// errExited says the process judged has exited (its PID free, or a zombie).
var errExited = errors.New("exited")

// handles are the pidfds of a plan's processes, by PID@START, each opened
// once and checked against the start time judged. A pidfd names one process
// for its whole life, so what is checked once is what every signal reaches.
type handles struct {
	fds    map[string]int
	errs   map[string]error
	pids   map[int]bool      // PIDs whose pidfd was opened and checked
	frozen map[string]string // PID@START to how it was frozen, a cgroup dir or "SIGSTOP"
}

func newHandles() *handles {
	return &handles{fds: map[string]int{}, errs: map[string]error{}, pids: map[int]bool{}, frozen: map[string]string{}}
}

// open opens t's pidfd, once, then checks that the PID still has the start
// time judged.
func (h *handles) open(t Target) {
	k := t.Key()
	if _, done := h.fds[k]; done {
		return
	}
	if _, done := h.errs[k]; done {
		return
	}
	fd, err := unix.PidfdOpen(t.PID, 0)
	if errors.Is(err, unix.ESRCH) {
		h.errs[k] = errExited
		return
	}
	if err != nil {
		h.errs[k] = fmt.Errorf("pidfd_open %d: %w", t.PID, err)
		return
	}
	// Checked after the open, since the pidfd now holds whichever process had
	// the PID, and only the start time says whether it is the one judged.
	st, err := readStat(t.PID)
	switch {
	case err != nil:
		err = errExited
	case st.start != t.StartTime:
		err = fmt.Errorf("pid %d is another process now (started at %d, not %d): the PID was reused since the judgement", t.PID, st.start, t.StartTime)
	case st.state == 'Z' || st.state == 'X':
		err = errExited
	}
	if err != nil {
		unix.Close(fd)
		h.errs[k] = err
		return
	}
	h.fds[k] = fd
	h.pids[t.PID] = true
}

// fd is t's checked pidfd, or why there is none.
func (h *handles) fd(t Target) (int, error) {
	if err := h.errs[t.Key()]; err != nil {
		return -1, err
	}
	fd, ok := h.fds[t.Key()]
	if !ok {
		return -1, fmt.Errorf("no pidfd was opened for %s", t.Key())
	}
	return fd, nil
}

// checked says whether pid is a process whose pidfd the plan opened and
// checked, and still that process.
func (h *handles) checked(pid int) bool {
	if !h.pids[pid] {
		return false
	}
	for k, fd := range h.fds {
		if strings.HasPrefix(k, strconv.Itoa(pid)+"@") {
			// A PID in the cgroup whose checked process exited is a new one.
			return !exited(fd, 0)
		}
	}
	return false
}

func (h *handles) close() {
	for _, fd := range h.fds {
		unix.Close(fd)
	}
}

// exited waits up to d for the process of pidfd fd to exit. A d of 0 only looks.
func exited(fd int, d time.Duration) bool {
	return exitedCtx(context.Background(), fd, d)
}

// exitedCtx is exited, ending early when ctx does.
func exitedCtx(ctx context.Context, fd int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		wait := time.Until(deadline)
		if wait < 0 {
			wait = 0
		}
		// Poll in slices, so that a cancelled context is seen.
		ms := min(int(wait/time.Millisecond), 100)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, ms)
		if err == nil && n > 0 {
			return true
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return false
		}
		if ms == 0 || ctx.Err() != nil {
			return false
		}
	}
}

// stat is what an action reads of /proc/PID/stat.
type stat struct {
	start uint64
	state byte
}

// readStat reads field 22 (start time) and field 3 (state) of /proc/PID/stat.
func readStat(pid int) (stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, err
	}
	// comm may hold spaces and parentheses, so the fields start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return stat{}, fmt.Errorf("/proc/%d/stat: no comm", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return stat{}, fmt.Errorf("/proc/%d/stat: %d fields after comm", pid, len(f))
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return stat{}, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return stat{start: start, state: f[0][0]}, nil
}

// stateOf is pid's state letter, '?' when it cannot be read.
func stateOf(pid int) byte {
	st, err := readStat(pid)
	if err != nil {
		return '?'
	}
	return st.state
}
