package procfs

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"strconv"

	"github.com/gpusnap/gpusnap/snapshot"
)

// /proc/PID/net/{tcp,tcp6,udp,udp6} list the sockets of the process's network
// namespace, one a line after a header.
//
//	 0: 0100007F:0D05 00000000:0000 0A ... 12345 ...
//
// Addresses are __be32 words in host-order hex, ports big-endian hex, then
// the state, and the inode is what an fd link names as socket:[inode].
// procfs's NetTCP is not used, because it keeps every line.

// tcpStates are the kernel's TCP states (include/net/tcp_states.h) by number.
var tcpStates = [...]string{1: "established", 2: "syn_sent", 3: "syn_recv", 4: "fin_wait1", 5: "fin_wait2",
	6: "time_wait", 7: "close", 8: "close_wait", 9: "last_ack", 10: "listen", 11: "closing", 12: "new_syn_recv"}

// ParseNetTable appends to out, for each line of a net/{tcp,udp}[6] table
// whose inode is in want, that socket. Malformed lines are skipped and
// counted in bad, since the table is the kernel's but a tree's is anyone's.
func ParseNetTable(data []byte, proto string, netns uint64, want map[uint64]bool, out []snapshot.Socket) (_ []snapshot.Socket, bad int) {
	udp := proto == "udp" || proto == "udp6"
	header := true
	for line := range bytes.Lines(data) {
		if header {
			header = false
			continue
		}
		f := bytes.Fields(line)
		if len(f) < 10 {
			if len(f) > 0 {
				bad++
			}
			continue
		}
		inode, err := strconv.ParseUint(string(f[9]), 10, 64)
		if err != nil {
			bad++
			continue
		}
		if !want[inode] {
			continue
		}
		local, err1 := parseNetAddr(f[1])
		remote, err2 := parseNetAddr(f[2])
		st, err3 := strconv.ParseUint(string(f[3]), 16, 8)
		if err1 != nil || err2 != nil || err3 != nil || st == 0 || st >= uint64(len(tcpStates)) {
			bad++
			continue
		}
		state := tcpStates[st]
		if udp {
			state = "unconnected"
			if st == 1 {
				state = "connected"
			}
		}
		out = append(out, snapshot.Socket{Proto: proto, Local: local.String(), Remote: remote.String(), State: state, Netns: netns, Inode: inode})
	}
	return out, bad
}

// errNetAddr is a net table address that is not HEX:PORT of 4 or 16 bytes.
type errNetAddr string

func (e errNetAddr) Error() string { return "bad address " + strconv.Quote(string(e)) }

// parseNetAddr reads "0100007F:0D05" or the 32-digit IPv6 form.
func parseNetAddr(b []byte) (netip.AddrPort, error) {
	i := bytes.IndexByte(b, ':')
	if i < 0 || (i != 8 && i != 32) {
		return netip.AddrPort{}, errNetAddr(b)
	}
	raw := make([]byte, i/2)
	if _, err := hex.Decode(raw, b[:i]); err != nil {
		return netip.AddrPort{}, errNetAddr(b)
	}
	port, err := strconv.ParseUint(string(b[i+1:]), 16, 16)
	if err != nil {
		return netip.AddrPort{}, errNetAddr(b)
	}
	// Each 32-bit word was printed as a host-order number. hex.Decode read
	// it big-endian, and the word's bytes are that number in host order.
	for w := 0; w < len(raw); w += 4 {
		binary.NativeEndian.PutUint32(raw[w:], binary.BigEndian.Uint32(raw[w:]))
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}

// TableInodes returns the inodes of a net table that are in want. field
// counts from 0 (6 in unix, 8 in packet, 9 in netlink and raw).
func TableInodes(data []byte, field int, want map[uint64]bool) map[uint64]bool {
	found := map[uint64]bool{}
	for line := range bytes.Lines(data) {
		f := bytes.Fields(line)
		if len(f) <= field {
			continue
		}
		if inode, err := strconv.ParseUint(string(f[field]), 10, 64); err == nil && want[inode] {
			found[inode] = true
		}
	}
	return found
}
