package diff

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// KindEgressConnection means a GPU-using process talks to a peer it did not at FROM.
const KindEgressConnection = "egress_connection"

var _ = register(&Rule{
	Kind: KindEgressConnection, Title: "GPU process egress connection",
	Severities: []Severity{Low, High},
	GPUUse:     true,
	compare:    []func(*comparison) []Finding{egressConnections},
	Order:      160,
})

// miningPoolPorts are the ports stratum mining pools and their proxies
// listen on (Falco's miner port list), where a GPU job has no business.
var miningPoolPorts = map[uint16]bool{
	3333: true, 3334: true, 3335: true, 3336: true, 3357: true, 4444: true, 5555: true, 5556: true,
	5588: true, 5730: true, 6099: true, 6666: true, 7777: true, 7778: true, 8888: true, 8899: true,
	9332: true, 9999: true, 14433: true, 14444: true, 45560: true, 45700: true,
}

// egressConnections reports a GPU process that holds at TO, and did not at
// FROM, an established TCP connection or a connected UDP socket. It is high
// for a mining-pool port or masquerade, else low, with each connection as
// evidence. Private and loopback peers count, since a stratum proxy on the
// job's own network is the usual way out.
func egressConnections(c *comparison) []Finding {
	var out []Finding
	for i := range c.to.Processes {
		p := &c.to.Processes[i]
		if socketsUnread(p) {
			c.notCompared(fmt.Sprintf("pid %d (%s): its sockets could not be read: its connections were not compared", p.PID, p.Comm))
		}
		var before []snapshot.Socket
		if b := c.fromByKey[idOf(p.PID, p.StartTime)]; b != nil {
			before = b.Sockets
		}
		var evidence []string
		pool := false
		for _, s := range p.Sockets {
			if !s.Peer() || slices.ContainsFunc(before, func(b snapshot.Socket) bool { return sameConnection(b, s) }) {
				continue
			}
			line := fmt.Sprintf("%s %s -> %s %s (netns %d)%s", s.Proto, s.Local, s.Remote, s.State, s.Netns, viaText(s))
			if miningPoolPorts[s.RemotePort()] {
				pool = true
				line += ": a mining-pool port"
			}
			evidence = append(evidence, line)
		}
		if len(evidence) == 0 {
			continue
		}
		sev := Low
		signs := masquerade(p)
		if pool || len(signs) > 0 {
			sev = High
		}
		ref := processRef(p)
		out = append(out, Finding{
			Kind:     KindEgressConnection,
			Severity: sev,
			Summary:  fmt.Sprintf("%s uses a GPU and holds %s it did not hold at FROM", describe(ref), count(len(evidence), "new connection")),
			Process:  ref,
			Evidence: append(evidence, signs...),
		})
	}
	return out
}

// viaText names the process that holds a socket for another, at the other
// end of one of its unix sockets, or is "".
func viaText(s snapshot.Socket) string {
	if s.ViaPID == 0 {
		return ""
	}
	return fmt.Sprintf(" via pid %d@%d, its unix socket's peer", s.ViaPID, s.ViaStartTime)
}

// sameConnection reports whether two sockets are one connection, with the
// same protocol, ends and namespace.
func sameConnection(a, b snapshot.Socket) bool {
	return a.Proto == b.Proto && a.Local == b.Local && a.Remote == b.Remote && a.Netns == b.Netns
}

// socketsUnread reports whether the capture tried and failed to read a
// process's sockets (its errors name "sockets:").
func socketsUnread(p *snapshot.Process) bool {
	return slices.ContainsFunc(p.Errors, func(e string) bool { return strings.HasPrefix(e, "sockets:") })
}
