package capture_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testwait"
	"github.com/gpusnap/gpusnap/snapshot"
)

// A worker that maps the fake GPU and, from a network namespace of its own,
// holds a connection to a stratum port: the capture names the connection and
// the namespace, and every TCP socket ss shows for the worker is there.
func TestLiveSocketsOfGPUUser(t *testing.T) {
	livetest.Require(t, "ss", "nsenter", "unshare", "ip")
	loop := livetest.NewLoop(t)
	w := livetest.StartWorker(t, loop.Node, livetest.WorkerOptions{Port: 3333, Netns: true})
	snap := captureLive(t)
	p := mustFind(t, snap, w.Proc, "worker")

	link, err := os.Readlink("/proc/" + strconv.Itoa(w.Proc.PID) + "/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	hostLink, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if link == hostLink {
		t.Fatalf("the worker shares this test's network namespace %s", link)
	}
	var established []snapshot.Socket
	for _, s := range p.Sockets {
		if "net:["+strconv.FormatUint(s.Netns, 10)+"]" != link {
			t.Errorf("socket %+v: netns %d, want %s", s, s.Netns, link)
		}
		if s.Peer() && s.RemotePort() == 3333 {
			established = append(established, s)
		}
	}
	if len(established) != 1 || established[0].Remote != "127.0.0.1:3333" || established[0].Proto != "tcp" {
		t.Errorf("connections to 127.0.0.1:3333: %+v, want one (all sockets %+v, errors %q)", established, p.Sockets, p.Errors)
	}

	// ss, in the worker's namespace, is the oracle: each of its TCP sockets
	// of the worker's PID is one of the capture's, by addresses and state.
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(w.Proc.PID), "-n", "ss", "-Htanp").CombinedOutput()
	if err != nil {
		t.Fatalf("ss: %v\n%s", err, out)
	}
	ssState := map[string]string{"ESTAB": "established", "LISTEN": "listen"}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.Contains(line, "pid="+strconv.Itoa(w.Proc.PID)+",") {
			continue
		}
		n++
		// ss writes a listener's peer 0.0.0.0:*, the kernel's table 0.0.0.0:0.
		want := snapshot.Socket{Proto: "tcp", State: ssState[f[0]], Local: f[3], Remote: strings.Replace(f[4], ":*", ":0", 1)}
		if !slices.ContainsFunc(p.Sockets, func(s snapshot.Socket) bool {
			return s.Proto == want.Proto && s.State == want.State && s.Local == want.Local && s.Remote == want.Remote
		}) {
			t.Errorf("ss shows %q; the capture's sockets %+v lack it", line, p.Sockets)
		}
	}
	if n != 3 {
		t.Errorf("ss shows %d TCP sockets of pid %d, want 3 (listener, both ends):\n%s", n, w.Proc.PID, out)
	}
	if len(p.Sockets) != 3 {
		t.Errorf("the capture keeps %d sockets of the worker, want 3: %+v", len(p.Sockets), p.Sockets)
	}
}

// A worker that connects to a stratum port, then moves to a fresh network
// namespace: its sockets stay in the namespace they were made in, which its
// /proc/PID/net no longer shows. The capture places them there (ss in that
// namespace is the oracle); a worker whose first namespace no process is in
// any more has sockets that cannot be placed, and the capture says so.
func TestLiveSocketsMovedNetns(t *testing.T) {
	livetest.Require(t, "ss", "unshare", "ip")
	loop := livetest.NewLoop(t)
	w := livetest.StartWorker(t, loop.Node, livetest.WorkerOptions{Port: 45560, MoveNetns: true})
	snap := captureLive(t)
	p := mustFind(t, snap, w.Proc, "worker")
	hostLink, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if link, _ := os.Readlink("/proc/" + strconv.Itoa(w.Proc.PID) + "/ns/net"); link == hostLink {
		t.Fatalf("the worker did not move from this test's network namespace %s", link)
	}
	out, err := exec.Command("ss", "-Htanp").CombinedOutput()
	if err != nil {
		t.Fatalf("ss: %v\n%s", err, out)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.Contains(line, "pid="+strconv.Itoa(w.Proc.PID)+",") {
			continue
		}
		n++
		remote := strings.Replace(f[4], ":*", ":0", 1)
		if !slices.ContainsFunc(p.Sockets, func(s snapshot.Socket) bool {
			return s.Local == f[3] && s.Remote == remote && "net:["+strconv.FormatUint(s.Netns, 10)+"]" == hostLink
		}) {
			t.Errorf("ss shows %q in %s; the capture's sockets %+v (errors %q) lack it", line, hostLink, p.Sockets, p.Errors)
		}
	}
	if n != 3 {
		t.Errorf("ss shows %d TCP sockets of pid %d, want 3 (listener, both ends):\n%s", n, w.Proc.PID, out)
	}

	// Connected in a namespace of its own, then moved: no process is in the
	// first namespace, and its sockets are not read, said as such.
	lone := livetest.StartWorker(t, loop.Node, livetest.WorkerOptions{Port: 3333, Netns: true, MoveNetns: true})
	p = mustFind(t, captureLive(t), lone.Proc, "worker")
	if len(p.Sockets) != 0 || !slices.ContainsFunc(p.Errors, func(e string) bool {
		return strings.HasPrefix(e, "sockets: 3 of its sockets are in no network namespace a process of the host is in")
	}) {
		t.Errorf("sockets %+v, errors %q: want none placed, and 3 said not read", p.Sockets, p.Errors)
	}
}

// relayScript maps the node argv[1] rw-s and forks a helper that holds a
// TCP connection to 127.0.0.1:argv[2], joined to it by a socketpair; with
// argv[3] "moved" it then enters a fresh network namespace (with "inside",
// before the pair is made there). With argv[4]
// it then forks that many harmless children, each joined to it by a
// socketpair, and with argv[5] that many more that inherit the helper's
// end of the pair. It prints the helper's PID.
const relayScript = `import ctypes, mmap, os, socket, sys, time
if sys.argv[3] == "inside":
    assert ctypes.CDLL(None, use_errno=True).unshare(0x40000000) == 0
a, b = socket.socketpair()
self_a, self_b = socket.socketpair()
pid = os.fork()
if pid == 0:
    a.close()
    s = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
    while True:
        time.sleep(60)
for i in range(int(sys.argv[5]) if len(sys.argv) > 5 else 0):
    if os.fork() == 0:
        while True:
            time.sleep(60)
b.close()
decoys = []
for i in range(int(sys.argv[4]) if len(sys.argv) > 4 else 0):
    x, y = socket.socketpair()
    if os.fork() == 0:
        while True:
            time.sleep(60)
    y.close()
    decoys.append(x)
if sys.argv[3] == "moved":
    assert ctypes.CDLL(None, use_errno=True).unshare(0x40000000) == 0
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 65536, mmap.MAP_SHARED)
print(pid, flush=True)
while True:
    time.sleep(60)`

// TestLiveSocketsViaUnixPeer: a GPU user holds no connection of its own and
// hands its traffic over a socketpair to a helper it forked, which holds
// the pool connection. The capture follows the unix socket one hop (its
// peer, by sock_diag) and keeps the helper's connection among the user's,
// naming the helper in via_pid; a socketpair within the user is not a hop.
func TestLiveSocketsViaUnixPeer(t *testing.T) {
	livetest.Require(t, "python3")
	loop := livetest.NewLoop(t)
	port := poolListener(t)
	// The user stays in the helper's network namespace, or moves to a
	// fresh one after its socketpair was made there (the pair lives on
	// where it was made, and is looked for there).
	for _, where := range []string{"stays", "moved"} {
		t.Run(where, func(t *testing.T) {
			user, helper := startRelay(t, loop.Node, port, where)
			remote := waitConnected(t, helper, port)

			// Both capture paths: the /proc walk indexes every socket fd; after the
			// BPF path the holder is looked for fd table by fd table.
			for _, path := range []string{capture.PathProc, capture.PathAuto} {
				snap, err := capture.Capture(context.Background(), capture.Options{Path: path})
				if err != nil {
					t.Fatal(err)
				}
				t.Run(cmp.Or(path, "auto"), func(t *testing.T) { checkViaPeer(t, snap, user, helper, remote) })
			}
		})
	}
}

// checkViaPeer holds the GPU user's record to the helper's one connection.
func checkViaPeer(t *testing.T, snap *snapshot.Snapshot, pid, helper int, remote string) {
	user := capture.FindPID(t, snap, pid)
	var via []snapshot.Socket
	for _, s := range user.Sockets {
		if s.ViaPID != 0 {
			via = append(via, s)
		}
	}
	if len(via) != 1 || via[0].Remote != remote || via[0].State != "established" || via[0].ViaPID != helper || via[0].ViaStartTime == 0 {
		t.Errorf("sockets via a peer %+v, want the helper %d's connection to %s (all %+v, errors %q, scan %q)", via, helper, remote, user.Sockets, user.Errors, snap.Scan.Errors)
	}
	if user.UnixSockets != 3 {
		t.Errorf("unix sockets %d, want 3 (the helper's end's peer, and a pair within itself)", user.UnixSockets)
	}
	for _, e := range user.Errors {
		if strings.HasPrefix(e, "sockets:") {
			t.Errorf("error %q", e)
		}
	}
}

// TestLiveSocketsUnixPeersPastCap: a GPU user joined by socketpairs to more
// harmless children than the capture follows, besides its pool helper,
// must not pass for a user without egress. Past the cap its record carries
// a sockets error, so triage reads its egress as not known.
func TestLiveSocketsUnixPeersPastCap(t *testing.T) {
	livetest.Require(t, "python3")
	loop := livetest.NewLoop(t)
	pid, _ := startRelay(t, loop.Node, poolListener(t), "stays", "20")
	for _, path := range []string{capture.PathProc, capture.PathAuto} {
		snap, err := capture.Capture(context.Background(), capture.Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		user := capture.FindPID(t, snap, pid)
		if !slices.ContainsFunc(user.Errors, func(e string) bool { return strings.HasPrefix(e, "sockets: unix peers past 16 not followed") }) {
			t.Errorf("%s: errors %q, want the peers past the cap named", cmp.Or(path, "auto"), user.Errors)
		}
	}
}

// startRelay runs relayScript with args after the node and port, in a
// process group of its own that is killed at cleanup, and waits for it to
// map the node. It returns the PIDs of the GPU user and its helper.
func startRelay(t *testing.T, node string, port int, args ...string) (user, helper int) {
	t.Helper()
	cmd := exec.Command("python3", append([]string{"-c", relayScript, node, strconv.Itoa(port)}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	line, rerr := bufio.NewReader(out).ReadString('\n')
	if helper, err = strconv.Atoi(strings.TrimSpace(line)); err != nil {
		t.Fatalf("python3 did not start its helper: %q %v %v", line, rerr, err)
	}
	livetest.WaitMapped(t, cmd.Process.Pid, "rw-s", node)
	return cmd.Process.Pid, helper
}

// poolListener listens on a loopback port for the test's life, accepting
// and holding every connection, and returns the port.
func poolListener(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestLiveSocketsUnixPeerManyHolders: the helper's end of a GPU user's
// socketpair is also held by decoy children, more than the scan's index
// keeps for one socket. The holders cut off are not silently dropped: the
// user has a sockets error, or (the BPF path reads every fd table) the
// helper's connection.
func TestLiveSocketsUnixPeerManyHolders(t *testing.T) {
	livetest.Require(t, "python3")
	loop := livetest.NewLoop(t)
	port := poolListener(t)
	pid, helper := startRelay(t, loop.Node, port, "stays", "0", "8")
	remote := waitConnected(t, helper, port)
	for _, path := range []string{capture.PathProc, capture.PathAuto} {
		snap, err := capture.Capture(context.Background(), capture.Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		user := capture.FindPID(t, snap, pid)
		cut := slices.ContainsFunc(user.Errors, func(e string) bool {
			return strings.HasPrefix(e, "sockets: the peer of unix socket") && strings.Contains(e, "held by more than")
		})
		seen := slices.ContainsFunc(user.Sockets, func(s snapshot.Socket) bool { return s.ViaPID == helper && s.Remote == remote })
		if path == capture.PathProc && !cut || !cut && !seen {
			t.Errorf("%s: errors %q, sockets %+v: want the cut holders named, or the helper %d followed", cmp.Or(path, "auto"), user.Errors, user.Sockets, helper)
		}
	}
}

// waitConnected waits for helper to hold an established connection to
// the loopback port, and returns its address.
func waitConnected(t *testing.T, helper, port int) string {
	t.Helper()
	if err := testwait.For(10*time.Second, "the helper to connect", func() bool {
		data, _ := os.ReadFile("/proc/" + strconv.Itoa(helper) + "/net/tcp")
		return strings.Contains(string(data), fmt.Sprintf(":%04X 01", port))
	}); err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}

// TestLiveSocketsUnixPeersWithoutSysAdmin: a capture without CAP_SYS_ADMIN
// cannot enter the network namespace a moved user left its pair in. That
// user carries a sockets error, and the helper of a user whose pair is in
// the capture's own namespace is still followed.
func TestLiveSocketsUnixPeersWithoutSysAdmin(t *testing.T) {
	if out := os.Getenv("GPUSNAP_TEST_SNAPSHOT"); out != "" {
		snap, err := capture.Capture(context.Background(), capture.Options{Path: capture.PathProc})
		if err != nil {
			t.Fatal(err)
		}
		data, err := json.Marshal(snap)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	livetest.Require(t, "python3", "setpriv")
	loop := livetest.NewLoop(t)
	port := poolListener(t)
	stays, helper := startRelay(t, loop.Node, port, "stays")
	moved, _ := startRelay(t, loop.Node, port, "inside")
	remote := waitConnected(t, helper, port)
	out := filepath.Join(t.TempDir(), "snap.json")
	cmd := exec.Command("setpriv", "--inh-caps=-sys_admin", "--bounding-set=-sys_admin", os.Args[0], "-test.run=^TestLiveSocketsUnixPeersWithoutSysAdmin$")
	cmd.Env = append(os.Environ(), "GPUSNAP_TEST_SNAPSHOT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("capture without CAP_SYS_ADMIN: %v\n%s", err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var snap snapshot.Snapshot
	if err := json.Unmarshal(data, &snap); err != nil {
		t.Fatal(err)
	}
	if u := capture.FindPID(t, &snap, moved); !slices.ContainsFunc(u.Errors, func(e string) bool { return strings.HasPrefix(e, "sockets: ") }) {
		t.Errorf("moved user errors %q, want a sockets error", u.Errors)
	}
	u := capture.FindPID(t, &snap, stays)
	if !slices.ContainsFunc(u.Sockets, func(s snapshot.Socket) bool { return s.ViaPID == helper && s.Remote == remote }) {
		t.Errorf("user in the capture's namespace: sockets %+v, errors %q, want the helper %d's connection", u.Sockets, u.Errors, helper)
	}
}
