package capture_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
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
// before the pair is made there; with "helper-moved" the helper enters one
// once it is connected; with "helper-hidden" it listens in a fresh one
// instead, leaves it for another and names itself "hidden"). With argv[4]
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
    if sys.argv[3] == "helper-hidden":
        assert ctypes.CDLL(None, use_errno=True).unshare(0x40000000) == 0
        s = socket.socket()
        s.bind(("0.0.0.0", 0))
        s.listen()
        assert ctypes.CDLL(None, use_errno=True).unshare(0x40000000) == 0
        ctypes.CDLL(None).prctl(15, b"hidden")
    else:
        s = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
    if sys.argv[3] == "helper-moved":
        assert ctypes.CDLL(None, use_errno=True).unshare(0x40000000) == 0
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
	// where it was made, and is looked for there), or the helper moves to
	// a fresh one after it connected (its connection is looked for in the
	// namespaces of the host's other processes, as a user's is).
	for _, where := range []string{"stays", "moved", "helper-moved"} {
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

// TestLiveSocketsViaUnixPeerUnread: the helper at the other end of a GPU
// user's socketpair listens in a network namespace it then leaves for a
// fresh one, so no process is in the namespace its socket lives in. Its
// sockets were not all read, and that is a sockets error of the user too,
// whose egress is then not known.
func TestLiveSocketsViaUnixPeerUnread(t *testing.T) {
	livetest.Require(t, "python3")
	loop := livetest.NewLoop(t)
	user, helper := startRelay(t, loop.Node, poolListener(t), "helper-hidden")
	if err := testwait.For(10*time.Second, "the helper to hide its socket", func() bool {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(helper) + "/comm")
		return strings.TrimSpace(string(comm)) == "hidden"
	}); err != nil {
		t.Fatal(err)
	}
	via := "sockets: via pid " + strconv.Itoa(helper) + ": "
	for _, path := range []string{capture.PathProc, capture.PathAuto} {
		snap, err := capture.Capture(context.Background(), capture.Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		u := capture.FindPID(t, snap, user)
		if !slices.ContainsFunc(u.Errors, func(e string) bool { return strings.HasPrefix(e, via) }) {
			t.Errorf("%s: user errors %q, want one beginning %q", cmp.Or(path, "auto"), u.Errors, via)
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
	cmd, out := startGroup(t, append([]string{"-c", relayScript, node, strconv.Itoa(port)}, args...)...)
	line, rerr := bufio.NewReader(out).ReadString('\n')
	helper, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("python3 did not start its helper: %q %v %v", line, rerr, err)
	}
	livetest.WaitMapped(t, cmd.Process.Pid, "rw-s", node)
	return cmd.Process.Pid, helper
}

// startGroup runs python3 with args in a process group of its own, killed
// at cleanup, and returns it and its stdout.
func startGroup(t *testing.T, args ...string) (*exec.Cmd, io.Reader) {
	t.Helper()
	cmd := exec.Command("python3", args...)
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
	return cmd, out
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
	if capturedWithoutSysAdmin(t) {
		return
	}
	livetest.Require(t, "python3", "setpriv")
	loop := livetest.NewLoop(t)
	port := poolListener(t)
	stays, helper := startRelay(t, loop.Node, port, "stays")
	moved, _ := startRelay(t, loop.Node, port, "inside")
	remote := waitConnected(t, helper, port)
	snap := captureWithoutSysAdmin(t)
	if u := capture.FindPID(t, snap, moved); !slices.ContainsFunc(u.Errors, func(e string) bool { return strings.HasPrefix(e, "sockets: ") }) {
		t.Errorf("moved user errors %q, want a sockets error", u.Errors)
	}
	u := capture.FindPID(t, snap, stays)
	if !slices.ContainsFunc(u.Sockets, func(s snapshot.Socket) bool { return s.ViaPID == helper && s.Remote == remote }) {
		t.Errorf("user in the capture's namespace: sockets %+v, errors %q, want the helper %d's connection", u.Sockets, u.Errors, helper)
	}
}

// capturedWithoutSysAdmin is the run of a test that captureWithoutSysAdmin
// starts: it captures the host, writes the snapshot where the first run
// reads it and reports true, and the test then ends. In the first run it
// reports false.
func capturedWithoutSysAdmin(t *testing.T) bool {
	out := os.Getenv("GPUSNAP_TEST_SNAPSHOT")
	if out == "" {
		return false
	}
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
	return true
}

// captureWithoutSysAdmin runs the test again without CAP_SYS_ADMIN (which
// entering another network namespace needs) and returns its capture.
func captureWithoutSysAdmin(t *testing.T) *snapshot.Snapshot {
	t.Helper()
	out := filepath.Join(t.TempDir(), "snap.json")
	cmd := exec.Command("setpriv", "--inh-caps=-sys_admin", "--bounding-set=-sys_admin", os.Args[0], "-test.run=^"+t.Name()+"$")
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
	return &snap
}

// crowdScript forks argv[3] GPU users, each mapping the node argv[1] and
// holding argv[5] socketpairs within itself and one to a helper it forked.
// With argv[4] "stays" each helper connects to the loopback port argv[2];
// with "inside" every process is in one fresh network namespace, made
// before the first socket. Each user prints "USER HELPER".
const crowdScript = `import ctypes, mmap, os, socket, sys, time
node, port, n, where, pairs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
if where == "inside":
    assert ctypes.CDLL(None, use_errno=True).unshare(0x40000000) == 0
for i in range(n):
    a, b = socket.socketpair()
    if os.fork() == 0:
        own = [socket.socketpair() for _ in range(pairs)]
        h = os.fork()
        if h == 0:
            a.close()
            if where == "stays":
                s = socket.create_connection(("127.0.0.1", port))
            while True:
                time.sleep(60)
        b.close()
        fd = os.open(node, os.O_RDWR)
        m = mmap.mmap(fd, 4096, mmap.MAP_SHARED)
        os.write(1, b"%d %d\n" % (os.getpid(), h))
        while True:
            time.sleep(60)
    a.close()
    b.close()
while True:
    time.sleep(60)`

// startCrowd runs crowdScript in a process group of its own, killed at
// cleanup, and returns each user's helper by the user's PID.
func startCrowd(t *testing.T, node string, port, n int, where string, pairs int) map[int]int {
	t.Helper()
	_, out := startGroup(t, "-c", crowdScript, node, strconv.Itoa(port), strconv.Itoa(n), where, strconv.Itoa(pairs))
	users := map[int]int{}
	lines := bufio.NewScanner(out)
	for len(users) < n && lines.Scan() {
		f := strings.Fields(lines.Text())
		u, err1 := strconv.Atoi(f[0])
		h, err2 := strconv.Atoi(f[len(f)-1])
		if len(f) != 2 || err1 != nil || err2 != nil {
			t.Fatalf("crowd: %q", lines.Text())
		}
		users[u] = h
	}
	if len(users) < n {
		t.Fatalf("crowd: %d of %d users started: %v", len(users), n, lines.Err())
	}
	return users
}

// TestLiveSocketsCrowdOneNamespace: 200 GPU users in one network
// namespace, each handing its traffic to a helper of its own that holds a
// pool connection. Every user gets its helper's connection, and the
// namespace's tables are read once for the users and once for all their
// helpers, not once a helper: what a tenant's process count costs is the
// namespaces it makes, not its processes.
func TestLiveSocketsCrowdOneNamespace(t *testing.T) {
	livetest.Require(t, "python3")
	loop := livetest.NewLoop(t)
	port := poolListener(t)
	const n = 200
	users := startCrowd(t, loop.Node, port, n, "stays", 0)
	for _, h := range users {
		waitConnected(t, h, port)
	}
	start := time.Now()
	snap, reads, err := capture.CaptureCounting(context.Background(), capture.Options{Path: capture.PathProc}, "/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("capture of %d users and %d helpers in one namespace: %v, %d reads of net/tcp", n, n, time.Since(start), reads)
	for u, h := range users {
		p := capture.FindPID(t, snap, u)
		if !slices.ContainsFunc(p.Sockets, func(s snapshot.Socket) bool { return s.ViaPID == h && s.State == "established" }) {
			t.Errorf("user %d: sockets %+v errors %q, want the helper %d's connection", u, p.Sockets, p.Errors, h)
		}
	}
	if reads > 2 {
		t.Errorf("net/tcp read %d times for %d users and their helpers in one namespace, want at most 2", reads, n)
	}
}

// TestLiveSocketsRefusedOncePerNamespace: a capture without CAP_SYS_ADMIN
// cannot enter the fresh network namespace 50 GPU users made their unix
// sockets in, 9 each. The refusal is said once in the scan's errors for
// the namespace, and each user carries one sockets error (its egress not
// known), not one a socket.
func TestLiveSocketsRefusedOncePerNamespace(t *testing.T) {
	if capturedWithoutSysAdmin(t) {
		return
	}
	livetest.Require(t, "python3", "setpriv")
	loop := livetest.NewLoop(t)
	const n = 50
	users := startCrowd(t, loop.Node, 0, n, "inside", 4)
	snap := captureWithoutSysAdmin(t)
	refused := 0
	for _, e := range snap.Scan.Errors {
		if strings.HasPrefix(e, "sockets: unix peers in network namespace ") && strings.Contains(e, "CAP_SYS_ADMIN") {
			refused++
		}
	}
	if refused != 1 {
		t.Errorf("scan errors %q: want the namespace's refusal once", snap.Scan.Errors)
	}
	for u := range users {
		p := capture.FindPID(t, snap, u)
		var socks []string
		for _, e := range p.Errors {
			if strings.HasPrefix(e, "sockets:") {
				socks = append(socks, e)
			}
		}
		if len(socks) != 1 {
			t.Errorf("user %d: %d sockets errors (the first %q), want one", u, len(socks), socks[:min(1, len(socks))])
		}
	}
}
