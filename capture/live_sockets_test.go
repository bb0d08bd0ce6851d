package capture_test

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/internal/livetest"
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
