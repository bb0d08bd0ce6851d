package reap

import (
	"bufio"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpusnap/gpusnap/internal/mountinfo"
	"github.com/gpusnap/gpusnap/snapshot"
)

// CgroupV2Mount is where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup,
// or /sys/fs/cgroup/unified on a hybrid host), "" when it is not.
func CgroupV2Mount() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := mountinfo.ParseLine(sc.Text()); ok && m.FSType == "cgroup2" && m.Root == "/" {
			return m.Point
		}
	}
	return ""
}

// Cgroups is Options.Cgroups for the cgroup v2 hierarchy mounted at mnt.
// It gives a process's own cgroup ("0::" in /proc/PID/cgroup) and the PIDs
// in it, when gpusnap may freeze or kill it. The root, init's, a slice
// (systemd's grouping of many units), and one with cgroups below it are
// never.
func Cgroups(mnt string) func(p *snapshot.Process) (string, []int) {
	return func(p *snapshot.Process) (string, []int) {
		cg := ""
		for _, line := range p.Cgroups {
			if rest, ok := strings.CutPrefix(line, "0::"); ok {
				cg = rest
			}
		}
		if !freezable(cg) || mnt == "" {
			return "", nil
		}
		dir := filepath.Join(mnt, cg)
		if !strings.HasPrefix(dir, filepath.Clean(mnt)+"/") || hasChildren(dir) {
			return "", nil
		}
		pids, err := cgroupProcs(dir)
		if err != nil || len(pids) == 0 {
			return "", nil
		}
		return cg, pids
	}
}

// freezable says whether gpusnap may freeze or kill the cgroup cg, as
// /proc/PID/cgroup names it.
func freezable(cg string) bool {
	base := path.Base(cg)
	return strings.HasPrefix(cg, "/") && cg != "/" && !strings.Contains(cg, " (deleted)") &&
		!strings.HasSuffix(base, ".slice") && base != "init.scope"
}

// hasChildren says whether dir has cgroups below it, which freezing or
// killing it would reach too.
func hasChildren(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return true
	}
	for _, e := range entries {
		if e.IsDir() {
			return true
		}
	}
	return false
}

// cgroupProcs lists the PIDs in the cgroup directory dir.
func cgroupProcs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, errors.New(dir + "/cgroup.procs: " + f + " is no PID")
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// freezeCgroup freezes (or thaws) the cgroup directory dir and, freezing,
// waits until cgroup.events says it is frozen.
func freezeCgroup(dir string, freeze bool) error {
	v := "0"
	if freeze {
		v = "1"
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte(v), 0); err != nil {
		return err
	}
	if !freeze {
		return nil
	}
	deadline := time.Now().Add(exitWait)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "frozen 1") {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("0"), 0)
	return errors.New(dir + " did not freeze")
}

// waitEmpty waits up to d for the cgroup directory dir to hold no process.
func waitEmpty(dir string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		pids, err := cgroupProcs(dir)
		if err != nil || len(pids) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
