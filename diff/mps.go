package diff

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// mpsClients are the PIDs of the live MPS clients a CUDA MPS server at TO
// serves: the processes NVML lists on the MPS list of a GPU the server is
// listed on, holds or maps, other than the server, alive at TO and not an
// earlier process's entry. nil for a process that is no MPS server
// (snapshot.Process.MPSServer) or shows a sign of compromise: a renamed
// miner is not spared. Each answer is kept, so every rule sees the same.
func (c *comparison) mpsClients(p *snapshot.Process) []int {
	if c.mps == nil {
		c.mps = map[*snapshot.Process][]int{}
	}
	if clients, done := c.mps[p]; done {
		return clients
	}
	var clients []int
	if p.MPSServer() && len(compromiseSigns(p)) == 0 {
		clients = c.findMPSClients(p)
	}
	c.mps[p] = clients
	return clients
}

func (c *comparison) findMPSClients(server *snapshot.Process) []int {
	minors := map[int]bool{}
	for _, u := range deviceUses(server) {
		if u.nvidia() && u.gpuMinor != nil {
			minors[*u.gpuMinor] = true
		}
	}
	pools := map[*pool]bool{}
	for _, e := range c.toNVML.byPID[server.PID] {
		pools[e.pool] = true
	}
	var clients []int
	for _, pl := range c.toNVML.pools {
		if !pools[pl] && (pl.minor == nil || !minors[*pl.minor]) {
			continue
		}
		for _, e := range pl.procs {
			pid := e.proc.PID
			p := c.toByPID[pid]
			if pid == server.PID || !slices.Contains(strings.Split(e.proc.Types, "+"), "M") || p == nil || p.Defunct() ||
				c.staleEntry(pid) != "" || slices.Contains(clients, pid) {
				continue
			}
			clients = append(clients, pid)
		}
	}
	slices.Sort(clients)
	return clients
}

// sparedMPSServer reports whether p is an MPS server with live clients at TO
// (mpsClients): it serves them, whoever started it, so it is no leftover of
// the tenant whose clients left, and its device uses raise nothing. The
// first time it says so, a note names the server and its clients. A server
// left with no client is judged as any process is.
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

// pidList writes PIDs as "pid 1, 2 and 3".
func pidList(pids []int) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	if len(s) == 1 {
		return "pid " + s[0]
	}
	return "pids " + strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// mpsQuit is how an operator stops CUDA MPS: the control daemon's quit ends
// it and its servers once their clients are done; shutdown_server stops one
// server of a daemon that serves others. Both need the daemon's pipe
// directory (CUDA_MPS_PIPE_DIRECTORY, /tmp/nvidia-mps by default).
const mpsQuit = "echo quit | nvidia-cuda-mps-control (or echo shutdown_server %d | nvidia-cuda-mps-control to stop this server alone), with the control daemon's CUDA_MPS_PIPE_DIRECTORY"

// mpsServerTriage says what an MPS server is and how to stop it, on the
// verdict its ownership gave. clients are its live clients at TO; known is
// false outside a diff (gpusnap ps), where NVML's MPS list names them.
func mpsServerTriage(t Triage, p *snapshot.Process, clients []int, known bool) Triage {
	quit := fmt.Sprintf(mpsQuit, p.PID)
	t.Why = append([]string{fmt.Sprintf("pid %d is CUDA MPS's server (%s): started by the MPS control daemon for its first client's user, it owns the GPU contexts its clients' work runs in", p.PID, snapshot.MPSServerExe)}, t.Why...)
	switch {
	case len(clients) > 0:
		t.Why = append(t.Why, fmt.Sprintf("it serves %s at TO (%s)", count(len(clients), "live client"), pidList(clients)))
		t.Next = "leave it while its clients run (killing it fails their work); once they are done, " + quit
	case !known:
		t.Next = "once its clients (NVML's MPS list, type M) are done, " + quit
	case t.Class == ClassLeftoverWorker:
		t.Why = append(t.Why, "NVML lists no live MPS client on its GPUs: it serves no one")
		t.Next = quit + "; kill -9 " + strconv.Itoa(p.PID) + " only where no control daemon answers"
	default:
		t.Why = append(t.Why, "NVML lists no live MPS client on its GPUs")
		t.Next += "; it stops with " + quit
	}
	return t
}
