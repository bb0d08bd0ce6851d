package diff

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// mpsClients are the live MPS clients, in PID order, of a CUDA MPS server at
// TO. A client is listed on the server's GPU, runs as its user, started no
// earlier than it and is no MPS server itself, so impostors cannot vouch for
// each other. It is nil for a non-server or one showing compromise, and
// cached.
func (c *comparison) mpsClients(p *snapshot.Process) []*snapshot.Process {
	if c.mps == nil {
		c.mps = map[*snapshot.Process][]*snapshot.Process{}
	}
	if clients, done := c.mps[p]; done {
		return clients
	}
	var clients []*snapshot.Process
	if lies, _ := compromiseSigns(p, signContext{}); p.MPSServer() && len(lies) == 0 {
		clients = c.findMPSClients(p)
	}
	c.mps[p] = clients
	return clients
}

func (c *comparison) findMPSClients(server *snapshot.Process) []*snapshot.Process {
	pools := map[*pool]bool{}
	for _, e := range c.toNVML.byPID[server.PID] {
		pools[e.pool] = true
	}
	var clients []*snapshot.Process
	for _, pl := range c.toNVML.pools {
		if !pools[pl] {
			continue
		}
		for _, e := range pl.procs {
			p := c.toByPID[e.proc.PID]
			if p == nil || p == server || p.Defunct() || p.MPSServer() || p.UID != server.UID || p.StartTime < server.StartTime ||
				!slices.Contains(strings.Split(e.proc.Types, "+"), "M") || c.staleEntry(p.PID) != "" || slices.Contains(clients, p) {
				continue
			}
			clients = append(clients, p)
		}
	}
	slices.SortFunc(clients, func(a, b *snapshot.Process) int { return a.PID - b.PID })
	return clients
}

// sparedMPSServer reports whether p is an MPS server with live clients at TO
// (mpsClients). Such a server serves them whoever started it, so it is no
// tenant's leftover and its device uses raise nothing. The first answer adds
// a note naming it and its clients. A server left with no client is judged as
// any process is.
func (c *comparison) sparedMPSServer(p *snapshot.Process) bool {
	clients := c.mpsClients(p)
	if len(clients) == 0 {
		return false
	}
	if c.mpsNoted == nil {
		c.mpsNoted = map[*snapshot.Process]bool{}
	}
	if !c.mpsNoted[p] {
		c.mpsNoted[p] = true
		c.notes = append(c.notes, fmt.Sprintf("%s (%s) is an MPS server with %s at TO (%s): it serves them, so it is no leftover and its device uses raised nothing",
			p.Key(), p.Comm, count(len(clients), "live client"), pidList(clients)))
	}
	return true
}

// pidList names processes by PID, as "pid 1" or "pids 1, 2 and 3".
func pidList(procs []*snapshot.Process) string {
	s := make([]string, len(procs))
	for i, p := range procs {
		s[i] = strconv.Itoa(p.PID)
	}
	if len(s) == 1 {
		return "pid " + s[0]
	}
	return "pids " + strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// mpsQuit is how an operator stops CUDA MPS. The control daemon's quit ends
// it and its servers once their clients are done, and shutdown_server stops
// one server of a daemon that serves others. Both need the daemon's pipe
// directory (CUDA_MPS_PIPE_DIRECTORY, /tmp/nvidia-mps by default).
const mpsQuit = "echo quit | nvidia-cuda-mps-control (or echo shutdown_server %d | nvidia-cuda-mps-control to stop this server alone), with the control daemon's CUDA_MPS_PIPE_DIRECTORY"

// mpsServerTriage says what an MPS server is and how to stop it, on the
// verdict its own ownership gave. A server with live clients at TO serves
// them. It is theirs, so it takes their owner's class (the tenant's client
// first, then another job's), and is left alone while they run.
func mpsServerTriage(t Triage, in triageInput, p *snapshot.Process) Triage {
	clients, quit := in.mpsClients, fmt.Sprintf(mpsQuit, p.PID)
	t.Why = append([]string{fmt.Sprintf("pid %d is CUDA MPS's server (%s): started by the MPS control daemon for its first client's user, it owns the GPU contexts its clients' work runs in", p.PID, snapshot.MPSServerExe)}, t.Why...)
	if len(clients) == 0 {
		t.Why = append(t.Why, "NVML lists no live MPS client on its GPUs: it serves no one")
		if t.Class == ClassLeftoverWorker {
			t.Next = quit + "; kill -9 " + strconv.Itoa(p.PID) + " only where no control daemon answers"
		} else {
			t.Next += "; it stops with " + quit
		}
		return t
	}
	t.Why = append(t.Why, fmt.Sprintf("it serves %s at TO (%s)", count(len(clients), "live client"), pidList(clients)))
	t.Next = "leave it while its clients run (killing it fails their work); once they are done, " + quit
	for _, cl := range clients {
		if why, ok := in.member[cl.Key()]; ok {
			t.Class = ClassTenant
			t.Why = append(t.Why, fmt.Sprintf("its client %d is the tenant's: %s", cl.PID, why))
			return t
		}
	}
	for _, cl := range clients {
		if owner := ownerText(cl); owner != "" {
			t.Class, t.Owner = ClassAnotherTenant, owner
			if in.tenant == "" {
				t.Class = ClassTenant // no tenant asked about (gpusnap ps), so the job's own is a tenant's
			}
			t.Why = append(t.Why, fmt.Sprintf("its client %d belongs to %s", cl.PID, owner))
			return t
		}
	}
	return t
}

// mpsNote adds to the verdict of an MPS server's owner (tenant, another
// tenant, a job's) what an MPS server is and how it stops. Any other
// process's verdict is returned as it is.
func mpsNote(t Triage, f *facts) Triage {
	if !f.mpsServer() {
		return t
	}
	return mpsServerTriage(t, f.in, f.p)
}
