package diff

import (
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

func sockets(ss ...snapshot.Socket) procOpt {
	return func(pr *snapshot.Process) { pr.Sockets = ss }
}

func tcp(local, remote, state string) snapshot.Socket {
	return snapshot.Socket{Proto: "tcp", Local: local, Remote: remote, State: state, Netns: 4026531840}
}

func TestEgressConnection(t *testing.T) {
	gpu := mapping("/dev/nvidia0", "rw-s", 0x7f0000000000, 1<<20, 0, "195:0")
	old := tcp("10.0.0.5:40000", "10.0.0.9:443", "established")
	listen := tcp("0.0.0.0:8080", "0.0.0.0:0", "listen")
	from := snap("from",
		proc(100, 1, "python3", "/usr/bin/python3.11", gpu, sockets(old, listen)),
		proc(200, 1, "python3", "/usr/bin/python3.11", gpu, sockets(old)),
	)
	pool := tcp("10.0.0.5:40001", "10.1.2.3:3333", "established") // private, still a pool port
	web := tcp("10.0.0.5:40002", "140.82.1.1:443", "established")
	udp := snapshot.Socket{Proto: "udp", Local: "10.0.0.5:5000", Remote: "10.0.0.9:53", State: "connected", Netns: 4026531840}
	to := snap("to",
		proc(100, 1, "python3", "/usr/bin/python3.11", gpu, sockets(old, listen, pool)),
		proc(200, 1, "python3", "/usr/bin/python3.11", gpu, sockets(old, web, udp, tcp("10.0.0.5:40003", "1.1.1.1:80", "time_wait"))),
		proc(300, 1, "python3", "/usr/bin/python3.11", gpu, sockets(old)),                                               // new process, so its connection is new
		proc(400, 1, "kworker/0:1", "/dev/shm/.x/xmrig", gpu, sockets(tcp("10.0.0.5:1", "8.8.8.8:443", "established"))), // masquerade
	)
	got := map[int]Finding{}
	for _, f := range Compare(from, to, Options{}).Findings {
		if f.Kind == KindEgressConnection {
			got[f.Process.PID] = f
		}
	}
	want := map[int]struct {
		sev   Severity
		lines int
	}{100: {High, 1}, 200: {Low, 2}, 300: {Low, 1}, 400: {High, 1}}
	if len(got) != len(want) {
		t.Fatalf("egress findings for %v, want pids 100, 200, 300, 400", got)
	}
	for pid, w := range want {
		f := got[pid]
		conns := 0
		for _, e := range f.Evidence {
			if strings.Contains(e, " -> ") {
				conns++
			}
		}
		if f.Severity != w.sev || conns != w.lines {
			t.Errorf("pid %d: %s with %d connections, want %s with %d: %q", pid, f.Severity, conns, w.sev, w.lines, f.Evidence)
		}
		if len(f.Process.Sockets) == 0 {
			t.Errorf("pid %d: the finding's process carries no sockets", pid)
		}
	}
	if e := got[100].Evidence[0]; e != "tcp 10.0.0.5:40001 -> 10.1.2.3:3333 established (netns 4026531840): a mining-pool port" {
		t.Errorf("pid 100 evidence %q", e)
	}
}

// A GPU user whose sockets could not be read leaves the diff incomplete,
// since no egress finding is not "no egress".
func TestEgressUnreadIsNotClean(t *testing.T) {
	gpu := mapping("/dev/nvidia0", "rw-s", 0x7f0000000000, 1<<20, 0, "195:0")
	p := proc(100, 1, "python3", "/usr/bin/python3.11", gpu)
	p.Errors = []string{"sockets: fd: permission denied"}
	r := Compare(snap("from", p), snap("to", p), Options{})
	if r.Complete || len(r.Findings) != 0 {
		t.Errorf("complete %v, findings %+v: want incomplete, none", r.Complete, r.Findings)
	}
}

// Triage says what was seen of egress, never that there was none. It names
// the sockets it read, and "not known" where some were not.
func TestTriageEgressIsWhatWasSeen(t *testing.T) {
	gpu := mapping("/dev/nvidia0", "rw-s", 0x7f0000000000, 1<<20, 0, "195:0")
	for _, unread := range []bool{false, true} {
		p := proc(100, 1, "python3", "/usr/bin/python3.11", gpu, cgroups("0::/"))
		want := "no sign that it lies seen in its name and exe and 0 internet sockets (its package unchecked)"
		if unread {
			p.Errors = []string{"sockets: 1 socket in no network namespace a process is in"}
			want = "; its sockets were not all read: egress not known"
		}
		r := Compare(snap("from"), snap("to", p), Options{})
		f := first(t, r)
		if f.Triage == nil || !strings.Contains(strings.Join(f.Triage.Why, "\n"), want) {
			t.Errorf("unread %v: triage %+v, want %q", unread, f.Triage, want)
		}
	}
}

// TestEgressViaUnixPeer holds that a connection the capture found at the
// other end of a GPU user's unix socket is the user's egress, named with its
// helper. A pool port there makes the finding high and the triage a
// compromise. An unconnected UDP socket sends anywhere, so the triage says
// egress is not known.
func TestEgressViaUnixPeer(t *testing.T) {
	gpu := mapping("/dev/nvidia0", "rw-s", 0x7f0000000000, 1<<20, 0, "195:0")
	via := tcp("127.0.0.1:40000", "127.0.0.1:3333", "established")
	via.ViaPID, via.ViaStartTime = 201, 77
	p := proc(100, 1, "python3", "/usr/bin/python3.11", gpu, cgroups("0::/"), sockets(via))
	r := Compare(snap("from"), snap("to", p), Options{})
	var egress *Finding
	for i := range r.Findings {
		if r.Findings[i].Kind == KindEgressConnection {
			egress = &r.Findings[i]
		}
	}
	if egress == nil || egress.Severity != High || !strings.Contains(strings.Join(egress.Evidence, "\n"), "127.0.0.1:3333 established (netns 4026531840) via pid 201@77, its unix socket's peer: a mining-pool port") {
		t.Fatalf("egress finding %+v", egress)
	}
	if tr := egress.Triage; tr == nil || tr.Class != ClassSuspectedCompromise || !strings.Contains(strings.Join(tr.Why, "\n"), "via pid 201@77") {
		t.Errorf("triage %+v, want a compromise naming the helper", egress.Triage)
	}

	udp := snapshot.Socket{Proto: "udp", Local: "0.0.0.0:5353", Remote: "0.0.0.0:0", State: "unconnected", Netns: 4026531840}
	p = proc(100, 1, "python3", "/usr/bin/python3.11", gpu, cgroups("0::/"), sockets(udp))
	f := first(t, Compare(snap("from"), snap("to", p), Options{}))
	if f.Triage == nil || !strings.Contains(strings.Join(f.Triage.Why, "\n"), "an unconnected UDP socket sends where sendto says, which no table shows: egress not known") {
		t.Errorf("unconnected UDP: triage %+v", f.Triage)
	}
}
