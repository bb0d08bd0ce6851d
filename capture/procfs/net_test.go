package procfs

import (
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

// Lines as this host's kernel writes them (cat /proc/net/tcp6, udp).
const (
	netTCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:0D05 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41001 1 0000000000000000 100 0 0 10 0
   1: 0100007F:A2C4 0100007F:0D05 01 00000000:00000000 00:00000000 00000000     0        0 41002 1 0000000000000000 20 4 30 10 -1
   2: 0A00000A:0016 0B00000A:E1F2 01 00000000:00000000 02:0009FB0B 00000000     0        0 41003 2 0000000000000000 20 4 1 10 -1
   3: garbage
   4: 0100007F:0D05 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 notanumber
`
	netTCP6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41004 1 0000000000000000 100 0 0 10 0
   1: 0000000000000000FFFF00000100007F:1F90 0000000000000000FFFF00000100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 41005 1 0000000000000000 20 4 30 10 -1
`
	netUDP = `   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  100: 00000000:14E9 00000000:0000 07 00000000:00000000 00:00000000 00000000   104        0 41006 2 0000000000000000 0
  101: 0100007F:9C40 0100007F:1A0A 01 00000000:00000000 00:00000000 00000000     0        0 41007 2 0000000000000000 0
`
)

func TestParseNetTable(t *testing.T) {
	want := map[uint64]bool{41001: true, 41002: true, 41003: true, 41005: true, 41006: true, 41007: true}
	got, bad := ParseNetTable([]byte(netTCP), "tcp", 7, want, nil)
	if bad != 2 {
		t.Errorf("bad lines %d, want 2 (garbage, a non-numeric inode)", bad)
	}
	got, _ = ParseNetTable([]byte(netTCP6), "tcp6", 7, want, got)
	got, _ = ParseNetTable([]byte(netUDP), "udp", 7, want, got)
	exp := []snapshot.Socket{
		{Proto: "tcp", Local: "127.0.0.1:3333", Remote: "0.0.0.0:0", State: "listen", Netns: 7, Inode: 41001},
		{Proto: "tcp", Local: "127.0.0.1:41668", Remote: "127.0.0.1:3333", State: "established", Netns: 7, Inode: 41002},
		{Proto: "tcp", Local: "10.0.0.10:22", Remote: "10.0.0.11:57842", State: "established", Netns: 7, Inode: 41003},
		// 41004 (::1 listening on 8080) is not wanted
		{Proto: "tcp6", Local: "127.0.0.1:8080", Remote: "127.0.0.1:50000", State: "established", Netns: 7, Inode: 41005},
		{Proto: "udp", Local: "0.0.0.0:5353", Remote: "0.0.0.0:0", State: "unconnected", Netns: 7, Inode: 41006},
		{Proto: "udp", Local: "127.0.0.1:40000", Remote: "127.0.0.1:6666", State: "connected", Netns: 7, Inode: 41007},
	}
	if len(got) != len(exp) {
		t.Fatalf("got %d sockets, want %d: %+v", len(got), len(exp), got)
	}
	for i := range exp {
		if got[i] != exp[i] {
			t.Errorf("socket %d: %+v, want %+v", i, got[i], exp[i])
		}
	}
	if !got[5].Peer() || got[4].Peer() || got[0].Peer() || got[5].RemotePort() != 6666 {
		t.Errorf("Peer/RemotePort: %+v", got)
	}
}

func TestParseNetAddrIPv6(t *testing.T) {
	ap, err := parseNetAddr([]byte("B80D0120000000000000000001000000:0D05"))
	if err != nil || ap.String() != "[2001:db8::1]:3333" {
		t.Errorf("2001:db8::1 port 3333: %v %v", ap, err)
	}
	for _, bad := range []string{"0100007F", "0100007:0D05", "ZZ00007F:0D05", "0100007F:10000"} {
		if _, err := parseNetAddr([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
