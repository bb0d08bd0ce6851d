// Package livetest sets up real GPU-tenant scenarios without a GPU. A loop
// device behind a node named nvidia0 is the GPU, and a C program maps it and
// forks a ghost that keeps it. Helpers need root, skip clearly where the host
// refuses, and undo their work by PID or name, not pattern, so other tests
// may run beside them.
package livetest

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/internal/testenv"
	"github.com/gpusnap/gpusnap/internal/testwait"
)

// waitLimit bounds every wait of the harness, for a mapping to appear, a
// process to exit or a cgroup to empty. It is generous, since other tests
// share the CPUs.
const waitLimit = 20 * time.Second

// Require skips the test unless it runs as root with the named tools on PATH,
// and under -short, which runs no live test (internal/testenv's rule).
func Require(t testing.TB, tools ...string) {
	t.Helper()
	testenv.Root(t, "a live test")
	testenv.Tools(t, tools...)
}

// Proc is a process the harness started, by its host PID, its PID inside its
// own pid namespace (the same as PID outside one), and its start time (field
// 22 of /proc/PID/stat), which together name it even if the PID is reused.
type Proc struct {
	PID       int
	NSPID     int
	StartTime uint64
}

// Alive reports whether the process still runs (a zombie does not count).
func (p Proc) Alive() bool {
	st, state, err := readStat(p.PID)
	return err == nil && st == p.StartTime && state != 'Z' && state != 'X'
}

// Kill sends SIGKILL to the process if it is still the same process, and
// waits until it is gone or a zombie. Calling it again is harmless.
func (p Proc) Kill(t testing.TB) {
	t.Helper()
	if err := p.kill(); err != nil {
		t.Errorf("livetest: %v", err)
	}
}

func (p Proc) kill() error {
	if p.PID <= 0 || !p.Alive() {
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %d: %w", p.PID, err)
	}
	return testwait.For(waitLimit, fmt.Sprintf("pid %d to exit", p.PID), func() bool { return !p.Alive() })
}

// newProc names the running process pid by its start time.
func newProc(pid, nspid int) (Proc, error) {
	st, _, err := readStat(pid)
	if err != nil {
		return Proc{}, err
	}
	return Proc{PID: pid, NSPID: nspid, StartTime: st}, nil
}

// readStat returns field 22 (start time) and field 3 (state) of /proc/PID/stat.
func readStat(pid int) (uint64, byte, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// comm may hold spaces and parentheses, so the fields start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no comm", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields after comm", pid, len(f))
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return st, f[0][0], nil
}

// WaitMapped waits until /proc/PID/maps has a line with permissions perms
// (e.g. "rw-s") for path, as the kernel prints it, and fails the test if it
// never comes.
func WaitMapped(t testing.TB, pid int, perms, path string) {
	t.Helper()
	err := testwait.For(waitLimit, fmt.Sprintf("pid %d to map %s %s", pid, perms, path), func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
		if err != nil {
			return false
		}
		for _, line := range strings.Split(string(b), "\n") {
			if p, name := mapsPermsPath(line); p == perms && name == path {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("livetest: %v", err)
	}
}

// mapsPermsPath returns the permissions and the path (spaces kept, " (deleted)"
// included) of a maps line, whose fields are range perms offset dev inode
// [padding] path.
func mapsPermsPath(line string) (perms, path string) {
	rest := line
	for i := 0; i < 5; i++ {
		rest = strings.TrimLeft(rest, " ")
		j := strings.IndexByte(rest, ' ')
		if j < 0 {
			return "", ""
		}
		if i == 1 {
			perms = rest[:j]
		}
		rest = rest[j:]
	}
	return perms, strings.TrimLeft(rest, " ")
}
