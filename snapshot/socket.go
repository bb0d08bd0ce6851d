package snapshot

import "net/netip"

// Socket is one internet socket a process holds, as its network namespace's
// tables show it.
type Socket struct {
	Proto  string `json:"proto"`  // tcp, tcp6, udp, udp6
	Local  string `json:"local"`  // IP:PORT ([IPv6]:PORT)
	Remote string `json:"remote"` // IP:PORT; 0.0.0.0:0 where unconnected
	State  string `json:"state"`  // the kernel's TCP state, lower case (established, listen ...), or for UDP connected or unconnected
	Netns  uint64 `json:"netns"`  // inode of the network namespace (ns/net), as ip netns identify and lsns name it
	Inode  uint64 `json:"-"`      // the socket's inode, which joins it to the fds that hold it
	// ViaPID and ViaStartTime name the process that holds this socket where
	// it is not the process's own. That is the one at the other end of one
	// of its unix sockets, which may carry its traffic.
	ViaPID       int    `json:"via_pid,omitempty"`
	ViaStartTime uint64 `json:"via_start_time,omitempty"`
}

// RemotePort is the port of Remote, 0 where unconnected or unparsable.
func (s Socket) RemotePort() uint16 {
	ap, err := netip.ParseAddrPort(s.Remote)
	if err != nil {
		return 0
	}
	return ap.Port()
}

// Peer reports whether the socket talks to one remote end, as an
// established TCP connection or a UDP socket connect(2)ed to a peer does.
func (s Socket) Peer() bool {
	return s.State == "established" || s.State == "connected"
}
