package capture_test

// Live tests: real processes on this machine (root), set up by internal/livetest
// (see docs/testing.md). A loop block device stands in for a GPU, reached
// through a node named nvidia0; fuser and lsof are the oracles.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testwait"
	"github.com/gpusnap/gpusnap/snapshot"
)

// captureLive captures this host's /proc, without NVML.
func captureLive(t *testing.T) *snapshot.Snapshot {
	t.Helper()
	snap, err := capture.Capture(context.Background(), capture.Options{})
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	return snap
}

// On the live /proc, uids are this host's, so its user database names them.
func TestLiveNamesUsers(t *testing.T) {
	snap := captureLive(t)
	uid := os.Getuid()
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		t.Skipf("uid %d has no name on this host: %v", uid, err)
	}
	want := u.Username
	for _, p := range snap.Processes {
		if p.PID == os.Getpid() {
			if p.User != want {
				t.Errorf("this test (pid %d, uid %d): user %q, want %q", p.PID, p.UID, p.User, want)
			}
			return
		}
	}
	t.Fatalf("the snapshot lacks this test's own process %d", os.Getpid())
}

// findProc returns the snapshot's record of p (same PID and start time), or nil.
func findProc(snap *snapshot.Snapshot, p livetest.Proc) *snapshot.Process {
	for i := range snap.Processes {
		if q := &snap.Processes[i]; q.PID == p.PID && q.StartTime == p.StartTime {
			return q
		}
	}
	return nil
}

func mustFind(t *testing.T, snap *snapshot.Snapshot, p livetest.Proc, role string) *snapshot.Process {
	t.Helper()
	q := findProc(snap, p)
	if q == nil {
		t.Fatalf("the snapshot lacks the %s %d@%d (%d processes read)", role, p.PID, p.StartTime, snap.Scan.ProcessesRead)
	}
	return q
}

// nodeStat stats path as pid sees it (through /proc/PID/root: a container's
// /dev is in its own mount namespace) and renders the maps dev field and inode.
func nodeStat(t *testing.T, pid int, path string) (dev string, inode uint64) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/root%s", pid, path), &st); err != nil {
		t.Fatal(err)
	}
	major := (st.Dev>>8)&0xfff | (st.Dev>>32)&^0xfff
	minor := st.Dev&0xff | (st.Dev>>12)&^0xff
	return fmt.Sprintf("%02x:%02x", major, minor), st.Ino
}

// checkGhostDevice checks what the snapshot says of a ghost's use of the loop
// device at path: the rw-s mapping and the two holders, rw and r, with the
// loop device's own number, class nvidia and GPU 0 (the N of nvidia0).
func checkGhostDevice(t *testing.T, p *snapshot.Process, pid int, path string, loop *livetest.Loop) {
	t.Helper()
	dev, inode := nodeStat(t, pid, path)
	var maps []snapshot.Mapping
	for _, m := range p.Mappings {
		if m.Path == path {
			maps = append(maps, m)
		}
	}
	if len(maps) != 1 {
		t.Fatalf("pid %d: %d mappings of %s, want 1: %+v", pid, len(maps), path, p.Mappings)
	}
	m := maps[0]
	if m.Perms != "rw-s" || !m.Writable() || m.Size != 64<<10 || m.End-m.Start != m.Size || m.Offset != 0 || m.Deleted {
		t.Errorf("mapping %s: perms %q size %d offset %d deleted %v, want rw-s 65536 0 false", m.Line(), m.Perms, m.Size, m.Offset, m.Deleted)
	}
	if m.Dev != dev || m.Inode != inode {
		t.Errorf("mapping %s: dev field %s inode %d, want the node's filesystem %s and inode %d", m.Line(), m.Dev, m.Inode, dev, inode)
	}
	if m.DeviceNumber.String() != loop.DeviceNumber() || m.DeviceType != "block" {
		t.Errorf("mapping %s: device %q %q, want the loop device's own %s block", m.Line(), m.DeviceNumber, m.DeviceType, loop.DeviceNumber())
	}
	if m.Class != snapshot.ClassNVIDIA || m.GPUMinor == nil || *m.GPUMinor != 0 {
		t.Errorf("mapping %s: class %q gpu minor %v, want nvidia 0", m.Line(), m.Class, m.GPUMinor)
	}
	if p.Mappings[0].Class != snapshot.ClassNVIDIA {
		t.Errorf("pid %d: NVIDIA mappings must come first: %+v", pid, p.Mappings)
	}
	if p.Raw == nil || !strings.Contains(p.Raw.Maps, m.Address+" rw-s ") {
		t.Errorf("pid %d uses an NVIDIA device: its raw maps text must be kept and hold %s", pid, m.Address)
	}

	access := map[string]int{}
	for _, h := range p.Holders {
		if h.Target != path {
			continue
		}
		access[h.Access] = h.FD
		if h.DeviceNumber.String() != loop.DeviceNumber() || h.DeviceType != "block" || h.Class != snapshot.ClassNVIDIA ||
			h.GPUMinor == nil || *h.GPUMinor != 0 || h.Deleted {
			t.Errorf("holder fd %d of %s: device %q %q class %q gpu %v deleted %v, want %s block nvidia 0",
				h.FD, path, h.DeviceNumber, h.DeviceType, h.Class, h.GPUMinor, h.Deleted, loop.DeviceNumber())
		}
	}
	if len(access) != 2 || access["rw"] == 0 || access["r"] == 0 {
		t.Errorf("pid %d: holders of %s by access %v, want one rw and one r: %+v", pid, path, access, p.Holders)
	}
	if !p.UsesNVIDIA() {
		t.Errorf("pid %d: UsesNVIDIA is false", pid)
	}
}

func TestLiveGhostKeepsTheDevice(t *testing.T) {
	loop := livetest.NewLoop(t)
	sc := livetest.StartGhost(t, loop, livetest.Options{})
	snap := captureLive(t)

	ghost := mustFind(t, snap, sc.Ghost, "ghost")
	if findProc(snap, sc.Tenant) != nil {
		t.Errorf("the tenant %d@%d exited, yet the snapshot has it", sc.Tenant.PID, sc.Tenant.StartTime)
	}
	if ghost.PPID == sc.Tenant.PID || ghost.PPID == 0 {
		t.Errorf("ghost's PPID is %d: it must have been re-parented away from the tenant %d", ghost.PPID, sc.Tenant.PID)
	}
	if ghost.Comm != "tenant" || ghost.Exe == "" || ghost.KernelThread {
		t.Errorf("ghost identity: comm %q exe %q kernel thread %v", ghost.Comm, ghost.Exe, ghost.KernelThread)
	}
	if len(ghost.NSpid) != 1 || ghost.NSpid[0] != sc.Ghost.PID {
		t.Errorf("ghost's NSpid %v, want [%d] (host namespace)", ghost.NSpid, sc.Ghost.PID)
	}
	checkGhostDevice(t, ghost, sc.Ghost.PID, sc.Path, loop)
}

func TestLiveContainerGhost(t *testing.T) {
	loop := livetest.NewLoop(t)
	sc := livetest.StartGhost(t, loop, livetest.Options{Container: true, GhostComm: "python3"})
	c := sc.Container
	snap := captureLive(t)

	ghost := mustFind(t, snap, sc.Ghost, "container's ghost")
	// A miner's disguise: comm says python3, exe is the truth.
	if ghost.Comm != "python3" || filepath.Base(ghost.Exe) != "tenant" {
		t.Errorf("ghost: comm %q exe %q, want python3 and .../tenant", ghost.Comm, ghost.Exe)
	}
	nsInit := mustFind(t, snap, c.Init, "container's init")
	if ghost.PPID != c.Init.PID {
		t.Errorf("ghost's PPID is %d, want the container's init %d (its tenant %d exited)", ghost.PPID, c.Init.PID, sc.Tenant.PID)
	}
	for _, p := range []struct {
		q     *snapshot.Process
		nspid []int
	}{{ghost, []int{sc.Ghost.PID, sc.Ghost.NSPID}}, {nsInit, []int{c.Init.PID, 1}}} {
		if !slices.Equal(p.q.NSpid, p.nspid) {
			t.Errorf("pid %d: NSpid %v, want %v", p.q.PID, p.q.NSpid, p.nspid)
		}
		if p.q.PIDNamespace != c.PIDNamespace {
			t.Errorf("pid %d: pid namespace %q, want %q", p.q.PID, p.q.PIDNamespace, c.PIDNamespace)
		}
		if p.q.ContainerID != c.ID || p.q.ContainerRuntime != "docker" {
			t.Errorf("pid %d: container %q runtime %q, want docker %s", p.q.PID, p.q.ContainerID, p.q.ContainerRuntime, c.ID)
		}
		if !slices.ContainsFunc(p.q.Cgroups, func(l string) bool { return strings.HasSuffix(l, ":"+c.CgroupPath) }) {
			t.Errorf("pid %d: cgroups %q lack %s", p.q.PID, p.q.Cgroups, c.CgroupPath)
		}
	}
	if self, _ := os.Readlink("/proc/self/ns/pid"); c.PIDNamespace == self {
		t.Errorf("the container shares the test's pid namespace %s", self)
	}
	// The host sees /dev/nvidia0 in the ghost's maps, whatever its own /dev holds.
	checkGhostDevice(t, ghost, sc.Ghost.PID, "/dev/nvidia0", loop)
}

// oracleUse is one use of a device that fuser or lsof reported: a PID, and
// what lsof said of it ("mem" for a mapping, or an fd number with its access).
type oracleUse struct {
	tool   string
	pid    int
	fd     string // lsof only: "mem" or the fd number
	access string // lsof only: r, w or u
}

// fuserPIDs runs fuser -v on nodes and returns the PIDs it prints on stdout
// (the verbose table goes to stderr, with a "Cannot stat" line per fd that
// PID 1 refuses). Exit status 1 means it found nothing.
func fuserPIDs(t *testing.T, nodes ...string) []oracleUse {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("fuser", append([]string{"-v"}, nodes...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		t.Fatalf("fuser -v %s: %v: %s", strings.Join(nodes, " "), err, stderr.Bytes())
	}
	var uses []oracleUse
	for _, w := range strings.Fields(stdout.String()) {
		pid, err := strconv.Atoi(strings.TrimRight(w, "cemfrn")) // access letters, where fuser appends them
		if err != nil {
			t.Fatalf("fuser -v: unexpected word %q in %q", w, stdout.String())
		}
		uses = append(uses, oracleUse{tool: "fuser", pid: pid})
	}
	return uses
}

// lsofUses runs lsof on node with its field output: p (PID), f (fd or "mem"), a (access).
func lsofUses(t *testing.T, node string) []oracleUse {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("lsof", "-w", "-F", "pfa", node)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1 && stdout.Len() == 0) {
		t.Fatalf("lsof %s: %v: %s", node, err, stderr.Bytes())
	}
	var uses []oracleUse
	pid := 0
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		switch v := line[1:]; line[0] {
		case 'p':
			if pid, err = strconv.Atoi(v); err != nil {
				t.Fatalf("lsof: bad line %q", line)
			}
		case 'f':
			uses = append(uses, oracleUse{tool: "lsof", pid: pid, fd: v})
		case 'a':
			if len(uses) > 0 {
				uses[len(uses)-1].access = strings.TrimSpace(v)
			}
		}
	}
	return uses
}

// checkOracle checks that gpusnap saw every use the oracle reported of the
// device numbered devnum: a mapping or holder in the same process, and for
// lsof's fds the same fd with the same access. A PID that is gone by now was
// a passer-by (udev probing a new loop device), not a miss.
func checkOracle(t *testing.T, snap *snapshot.Snapshot, uses []oracleUse, devnum string) {
	t.Helper()
	byPID := map[int]*snapshot.Process{}
	for i := range snap.Processes {
		byPID[snap.Processes[i].PID] = &snap.Processes[i]
	}
	for _, u := range uses {
		p := byPID[u.pid]
		if p == nil {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", u.pid)); err != nil {
				t.Logf("%s reported pid %d, which has since exited", u.tool, u.pid)
				continue
			}
			t.Errorf("%s reports pid %d using %s; the snapshot lacks the process", u.tool, u.pid, devnum)
			continue
		}
		mapped := slices.ContainsFunc(p.Mappings, func(m snapshot.Mapping) bool { return m.DeviceNumber.String() == devnum })
		held := slices.ContainsFunc(p.Holders, func(h snapshot.Holder) bool { return h.DeviceNumber.String() == devnum })
		switch {
		case u.fd == "" && !mapped && !held:
			t.Errorf("%s reports pid %d using %s; gpusnap has neither a mapping nor a holder of it", u.tool, u.pid, devnum)
		case u.fd == "mem" && !mapped:
			t.Errorf("%s reports pid %d mapping %s; gpusnap has no mapping of it: %+v", u.tool, u.pid, devnum, p.Mappings)
		case u.fd != "" && u.fd != "mem":
			fd, _ := strconv.Atoi(u.fd)
			want := map[string]string{"r": "r", "w": "w", "u": "rw"}[u.access]
			if !slices.ContainsFunc(p.Holders, func(h snapshot.Holder) bool {
				return h.FD == fd && h.DeviceNumber.String() == devnum && h.Access == want
			}) {
				t.Errorf("lsof reports pid %d fd %s%s on %s; gpusnap has no holder fd %d with access %q: %+v",
					u.pid, u.fd, u.access, devnum, fd, want, p.Holders)
			}
		}
	}
}

func hasPID(uses []oracleUse, pid int) bool {
	return slices.ContainsFunc(uses, func(u oracleUse) bool { return u.pid == pid })
}

// TestLiveFuserLsofOracle runs fuser -v and lsof on the live scenarios: every
// process they report for the device must be in gpusnap's holders or
// mappings; and gpusnap sees the container's /dev/nvidia0, which fuser and
// lsof (matching the node's inode, not the device) miss.
func TestLiveFuserLsofOracle(t *testing.T) {
	livetest.Require(t, "fuser", "lsof")
	loop := livetest.NewLoop(t)
	plain := livetest.StartGhost(t, loop, livetest.Options{})
	held := livetest.Hold(t, loop.Node) // a tenant that did not fork, beside the ghost
	boxed := livetest.StartGhost(t, loop, livetest.Options{Container: true})

	var fuser, lsof []oracleUse
	for _, node := range []string{loop.Node, loop.Dev} {
		fuser = append(fuser, fuserPIDs(t, node)...)
		lsof = append(lsof, lsofUses(t, node)...)
	}
	// Captured after the oracles: whatever they saw has had time to appear.
	snap := captureLive(t)
	for _, uses := range [][]oracleUse{fuser, lsof} {
		for _, p := range []livetest.Proc{plain.Ghost, held} {
			if !hasPID(uses, p.PID) {
				t.Errorf("%s did not report pid %d, which maps and holds %s: the oracle itself is off", uses[0].tool, p.PID, loop.Node)
			}
		}
		checkOracle(t, snap, uses, loop.DeviceNumber())
	}
	if !slices.ContainsFunc(lsof, func(u oracleUse) bool { return u.pid == held.PID && u.fd == "mem" }) {
		t.Errorf("lsof did not report the mapping of pid %d", held.PID)
	}

	// The container's ghost: gpusnap must see it by the device's own number.
	ghost := mustFind(t, snap, boxed.Ghost, "container's ghost")
	checkGhostDevice(t, ghost, boxed.Ghost.PID, "/dev/nvidia0", loop)
	for _, uses := range [][]oracleUse{fuser, lsof} {
		if hasPID(uses, boxed.Ghost.PID) {
			t.Logf("note: %s did report the container's ghost %d this time", uses[0].tool, boxed.Ghost.PID)
		} else {
			t.Logf("%s missed the container's ghost %d (its /dev/nvidia0 is another inode); gpusnap has it as %s",
				uses[0].tool, boxed.Ghost.PID, loop.DeviceNumber())
		}
	}
}

// TestLiveNotDevices: a rw-s mapping of /dev/zero is shared memory (the
// kernel shows it as "/dev/zero (deleted)") and a /dev/shm file is a file:
// neither is a device mapping. A mapping of the loop device by its own name
// is a device, of the other class.
func TestLiveNotDevices(t *testing.T) {
	loop := livetest.NewLoop(t)
	zero := livetest.Hold(t, "/dev/zero")
	livetest.WaitMapped(t, zero.PID, "rw-s", "/dev/zero (deleted)")

	shm, err := os.CreateTemp("/dev/shm", "gpusnap-live-*")
	if err != nil {
		t.Skipf("live /proc test: no /dev/shm here: %v", err)
	}
	t.Cleanup(func() { os.Remove(shm.Name()) })
	if err := shm.Truncate(64 << 10); err != nil {
		t.Fatal(err)
	}
	shm.Close()
	shmProc := livetest.Hold(t, shm.Name())
	livetest.WaitMapped(t, shmProc.PID, "rw-s", shm.Name())

	other := livetest.Hold(t, loop.Dev)
	livetest.WaitMapped(t, other.PID, "rw-s", loop.Dev)

	snap := captureLive(t)

	z := mustFind(t, snap, zero, "/dev/zero mapper")
	if len(z.Mappings) != 0 {
		t.Errorf("a rw-s /dev/zero (deleted) mapping is shmem, not a device: %+v", z.Mappings)
	}
	// Its fds on /dev/zero are device holders all the same: 1:5 is a device.
	for _, h := range z.Holders {
		if h.Target == "/dev/zero" && (h.DeviceNumber.String() != "1:5" || h.DeviceType != "char" || h.Class != snapshot.ClassOther) {
			t.Errorf("holder of /dev/zero: %+v, want 1:5 char other", h)
		}
	}
	if z.UsesNVIDIA() || z.Raw != nil {
		t.Errorf("the /dev/zero mapper uses no NVIDIA device (raw kept: %v)", z.Raw != nil)
	}

	s := mustFind(t, snap, shmProc, "/dev/shm mapper")
	for _, m := range s.Mappings {
		if strings.HasPrefix(m.Path, "/dev/shm/") {
			t.Errorf("a /dev/shm file is not a device: mapping %s", m.Line())
		}
	}
	for _, h := range s.Holders {
		if strings.HasPrefix(h.Target, "/dev/shm/") {
			t.Errorf("a /dev/shm file is not a device: holder %+v", h)
		}
	}

	o := mustFind(t, snap, other, "loop device mapper")
	i := slices.IndexFunc(o.Mappings, func(m snapshot.Mapping) bool { return m.Path == loop.Dev })
	switch {
	case i < 0:
		t.Errorf("pid %d maps %s rw-s; the snapshot has no such mapping: %+v", other.PID, loop.Dev, o.Mappings)
	case o.Mappings[i].Class != snapshot.ClassOther || o.Mappings[i].DeviceNumber.String() != loop.DeviceNumber() || o.Mappings[i].GPUMinor != nil:
		t.Errorf("mapping of %s: %+v, want class other, device %s, no GPU", loop.Dev, o.Mappings[i], loop.DeviceNumber())
	}
	if o.UsesNVIDIA() {
		t.Errorf("%s is not an NVIDIA device (its name is not nvidia*)", filepath.Base(loop.Dev))
	}
}

// TestLiveDeviceFdBeyondPathMax: a process holds a device opened through a
// path longer than PATH_MAX, which the kernel cannot render (readlink of the
// fd fails, as d_path in the iterator does). Both capture paths keep the
// holder by its device number, with no path and an error naming the fd: a
// tenant cannot hide a GPU from a snapshot that way.
func TestLiveDeviceFdBeyondPathMax(t *testing.T) {
	loop := livetest.NewLoop(t)
	fd := openDeepNode(t, loop, 20) // 20 x 251 bytes: beyond PATH_MAX (4096)
	if _, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); !errors.Is(err, unix.ENAMETOOLONG) {
		t.Skipf("this kernel renders the fd's path (readlink: %v)", err)
	}
	for _, path := range []string{capture.PathProc, capture.PathBPF} {
		t.Run(path, func(t *testing.T) {
			p := findLive(t, capturePath(t, path), os.Getpid())
			i := slices.IndexFunc(p.Holders, func(h snapshot.Holder) bool { return h.FD == fd })
			if i < 0 {
				t.Fatalf("fd %d on %s, opened through a path beyond PATH_MAX, was dropped; holders %+v", fd, loop.DeviceNumber(), p.Holders)
			}
			h := p.Holders[i]
			if h.DeviceNumber.String() != loop.DeviceNumber() || h.Target != "" || h.Class != snapshot.ClassOther {
				t.Errorf("holder %+v: want device %s, no path, class other (a loop device's number)", h, loop.DeviceNumber())
			}
			want := fmt.Sprintf("fd %d: file name too long: kept by its device number", fd)
			if !slices.ContainsFunc(p.Errors, func(e string) bool { return strings.HasPrefix(e, want) }) {
				t.Errorf("errors %q lack %q", p.Errors, want)
			}
		})
	}
}

// TestLiveDeviceInThreadFdTable: a process holds the device only in a
// thread's own fd table (the thread was cloned without CLONE_FILES).
// /proc/PID/fd shows the leader's table (as fuser and lsof read it); the
// capture finds it in the thread's task/TID/fd, marked with its TID.
//
// With the leader exited, the process is read through a live thread sharing
// the leader's table, and the thread's own table is found all the same.
func TestLiveDeviceInThreadFdTable(t *testing.T) {
	loop := livetest.NewLoop(t)
	for _, c := range []struct {
		name        string
		leaderExits bool
	}{{"leader", false}, {"leader-exited", true}} {
		p, thread := livetest.HoldInThreadTable(t, loop.Node, c.leaderExits)
		for _, path := range []string{capture.PathProc, capture.PathBPF} {
			t.Run(c.name+"/"+path, func(t *testing.T) {
				q := mustFind(t, capturePath(t, path), p, "holder in a thread's own fd table")
				i := slices.IndexFunc(q.Holders, func(h snapshot.Holder) bool { return h.Target == loop.Node })
				if i < 0 {
					t.Fatalf("the fd on %s in thread %d's own table was not found; holders %+v, errors %q", loop.Node, thread.PID, q.Holders, q.Errors)
				}
				if h := q.Holders[i]; h.TID != thread.PID || h.Class != snapshot.ClassNVIDIA || h.Access != "rw" {
					t.Errorf("holder %+v: want TID %d, class nvidia, access rw", h, thread.PID)
				}
				if !q.UsesNVIDIA() {
					t.Error("the process uses an NVIDIA device (in its thread's table)")
				}
			})
		}
	}
}

// openDeepNode makes a node of loop's device under levels nested directories
// of 250-byte names (a path of levels x 251 bytes, which the kernel cannot
// render past PATH_MAX), and opens it read-write; Cleanup closes it.
func openDeepNode(t *testing.T, loop *livetest.Loop, levels int) int {
	t.Helper()
	dir, err := unix.Open(t.TempDir(), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.Repeat("d", 250)
	for range levels {
		if err := unix.Mkdirat(dir, name, 0o700); err != nil {
			t.Fatal(err)
		}
		sub, err := unix.Openat(dir, name, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		unix.Close(dir)
		if err != nil {
			t.Fatal(err)
		}
		dir = sub
	}
	defer unix.Close(dir)
	if err := unix.Mknodat(dir, "nvidia0", unix.S_IFBLK|0o600, int(unix.Mkdev(loop.Major, loop.Minor))); err != nil {
		t.Skipf("mknod refused here: %v", err)
	}
	fd, err := unix.Openat(dir, "nvidia0", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// TestLiveDeviceMappedBeyondPathMax: this process maps a device through a
// path of 5 KB, and another through one of 75 KB (longer than the maps
// reader's 64 KiB buffer): maps writes both whole, readlink and d_path
// neither. Both capture paths keep each mapping unnamed, by its device
// number, with an error naming it; no snapshot carries the path.
func TestLiveDeviceMappedBeyondPathMax(t *testing.T) {
	loop := livetest.NewLoop(t)
	var addrs []string
	for _, levels := range []int{20, 300} {
		fd := openDeepNode(t, loop, levels)
		mem, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			t.Skipf("mmap of the loop device refused here: %v", err)
		}
		t.Cleanup(func() { unix.Munmap(mem) })
		start := uintptr(unsafe.Pointer(&mem[0]))
		addrs = append(addrs, fmt.Sprintf("%08x-%08x", start, start+4096))
	}
	for _, path := range []string{capture.PathProc, capture.PathBPF} {
		t.Run(path, func(t *testing.T) {
			p := findLive(t, capturePath(t, path), os.Getpid())
			for _, addr := range addrs {
				i := slices.IndexFunc(p.Mappings, func(m snapshot.Mapping) bool { return m.Address == addr })
				if i < 0 {
					t.Errorf("the mapping %s of %s through a deep path was dropped; errors %q", addr, loop.DeviceNumber(), p.Errors)
					continue
				}
				if m := p.Mappings[i]; m.Path != "" || m.DeviceNumber.String() != loop.DeviceNumber() || m.Perms != "rw-s" {
					t.Errorf("mapping %.200s: want no path, device %s, rw-s", m.Line(), loop.DeviceNumber())
				}
				if want := "maps: " + addr + ": file name too long"; !slices.Contains(p.Errors, want) {
					t.Errorf("errors %q lack %q", p.Errors, want)
				}
			}
			for _, m := range p.Mappings {
				if len(m.Path) >= 4096 {
					t.Errorf("a mapping kept a path of %d bytes", len(m.Path))
				}
			}
		})
	}
}

// TestLiveOtherPIDNamespaceProcfs: a procfs mounted by a process of another
// pid namespace names other PIDs than kcmp takes: a capture of it says that
// threads' own fd tables were not looked for, and the host's own /proc is
// this process's namespace.
func TestLiveOtherPIDNamespaceProcfs(t *testing.T) {
	livetest.Require(t, "unshare")
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	mnt := filepath.Join(dir, "proc")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "--pid", "--fork", "sh", "-c",
		"mount -t proc proc "+mnt+" && touch "+ready+" && exec sleep 60")
	if err := cmd.Start(); err != nil {
		t.Skipf("unshare: %v", err)
	}
	t.Cleanup(func() {
		syscall.Unmount(mnt, syscall.MNT_DETACH)
		cmd.Process.Kill()
		cmd.Wait()
	})
	// 30 s: a loaded host is slow to start the namespace; a skip here hides the test.
	if testwait.For(30*time.Second, "the new pid namespace's procfs", func() bool { _, err := os.Stat(ready); return err == nil }) != nil {
		t.Skip("a procfs of a new pid namespace could not be mounted here")
	}
	snap, err := capture.Capture(context.Background(), capture.Options{ProcRoot: mnt})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(snap.Scan.Errors, func(e string) bool { return strings.Contains(e, "another pid namespace") }) {
		t.Errorf("scan errors %q do not say the procfs is of another pid namespace", snap.Scan.Errors)
	}
	if host := captureLive(t); slices.ContainsFunc(host.Scan.Errors, func(e string) bool { return strings.Contains(e, "another pid namespace") }) {
		t.Errorf("the host's /proc was taken for another pid namespace: %q", host.Scan.Errors)
	}
}
