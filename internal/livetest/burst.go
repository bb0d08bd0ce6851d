package livetest

import (
	_ "embed"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// burstSource is the C helper of short-lived GPU workers. Each opens a device
// node read-write, maps it shared read-write and exits within a few ms.
//
//go:embed helper/burst.c
var burstSource []byte

// BuildBurst compiles burst.c with gcc into a temporary directory.
func BuildBurst(t testing.TB) string {
	t.Helper()
	return buildC(t, "burst", burstSource)
}

// Burst runs n workers of bin (BuildBurst) on path, each opening it
// read-write, mapping it shared and exiting, and returns their host PIDs.
func Burst(t testing.TB, bin, path string, n int) []int {
	t.Helper()
	out, err := exec.Command(bin, strconv.Itoa(n), path).Output()
	if err != nil {
		t.Fatalf("livetest: burst: %v", err)
	}
	return parseLines(t, string(out))
}

// BurstInContainer runs n workers of bin the way a container runtime would
// place them, in their own pid and mount namespaces, with a tmpfs /dev where
// /dev/nvidia0 is mknod'ed for the loop device, inside a docker-<id>.scope
// cgroup. It returns the container and the workers' PIDs inside it.
func BurstInContainer(t testing.TB, bin string, loop *Loop, n int) (*Container, []int) {
	t.Helper()
	requireContainers(t)
	c := newCgroup(t)
	inner := fmt.Sprintf(`mount -t tmpfs tmpfs /dev && mknod -m 600 /dev/nvidia0 b %d %d && exec %s %d /dev/nvidia0`,
		loop.Major, loop.Minor, quote(bin), n)
	outer := fmt.Sprintf(`echo $$ > %s && exec unshare -m -p --fork --kill-child --mount-proc sh -c %s`,
		quote(filepath.Join(c.CgroupDir, "cgroup.procs")), quote(inner))
	out, err := exec.Command("sh", "-c", outer).Output()
	if err != nil {
		t.Fatalf("livetest: burst in a container: %v", err)
	}
	return c, parseLines(t, string(out))
}

func parseLines(t testing.TB, out string) []int {
	t.Helper()
	var pids []int
	for _, f := range strings.Fields(out) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("livetest: burst printed %q", f)
		}
		pids = append(pids, pid)
	}
	return pids
}
