package capture

import (
	"fmt"
	"strconv"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/snapshot"
)

// otherTables are the tables of a network namespace that name sockets
// other than TCP and UDP ones, with the field of each line holding the
// inode. A socket found there is placed, not a connection that was missed.
var otherTables = []struct {
	name  string
	field int
}{{"unix", 6}, {"netlink", 9}, {"packet", 8}, {"raw", 9}, {"raw6", 9}, {"icmp", 9}, {"icmp6", 9}, {"udplite", 9}, {"udplite6", 9}}

// nsTables is what one network namespace's tables say of the inodes asked for.
type nsTables struct {
	ns    uint64 // the namespace's inode
	pid   int    // a process in it, through whose /proc/PID it was read
	inet  map[uint64]snapshot.Socket
	unix  map[uint64]bool
	other map[uint64]bool // netlink, packet, raw, icmp, udplite
}

// readNamespace reads the tables of network namespace ns through
// /proc/PID/net, for the inodes in want. An internet table that cannot be
// read is an error, while the other tables only place sockets.
func (cfg *scanConfig) readNamespace(r *procfs.Reader, pid int, ns uint64, want map[uint64]bool) (*nsTables, error) {
	dir := strconv.Itoa(pid) + "/net/"
	var socks []snapshot.Socket
	for _, table := range netTables {
		data, err := r.ReadFileAt(cfg.rootfd, cfg.root, dir+table, nil)
		if err != nil {
			return nil, err
		}
		socks, _ = procfs.ParseNetTable(data, table, ns, want, socks)
	}
	t := &nsTables{ns: ns, pid: pid, inet: make(map[uint64]snapshot.Socket, len(socks)), unix: map[uint64]bool{}, other: map[uint64]bool{}}
	for _, so := range socks {
		t.inet[so.Inode] = so
	}
	for _, o := range otherTables {
		data, err := r.ReadFileAt(cfg.rootfd, cfg.root, dir+o.name, nil)
		if err != nil {
			continue
		}
		for ino := range procfs.TableInodes(data, o.field, want) {
			if o.name == "unix" {
				t.unix[ino] = true
			} else {
				t.other[ino] = true
			}
		}
	}
	return t, nil
}

// give records socket ino of sf's process where the tables place it, and
// reports whether they did.
func (t *nsTables) give(sf *sockFds, ino uint64) bool {
	p := sf.p
	so, inet := t.inet[ino]
	switch {
	case t.unix[ino]:
		p.UnixSockets++
		sf.unix = append(sf.unix, unixSock{ino: ino, ns: t.ns, pid: t.pid})
	case t.other[ino]:
	case !inet:
		return false
	case len(p.Sockets) < SocketsPerProcess:
		p.Sockets = append(p.Sockets, so)
	default:
		p.SocketsDropped++
	}
	return true
}

// placeElsewhere looks for the sockets no GPU user's own namespace holds in
// the namespaces of s's other processes, read excepted. A process can
// connect, then move to a fresh namespace, and its sockets stay where they
// were made. A socket still not placed is said as not read.
func (cfg *scanConfig) placeElsewhere(r *procfs.Reader, s *snapshot.Snapshot, read []uint64, unplaced map[*sockFds][]uint64) {
	want := map[uint64]bool{}
	for _, inos := range unplaced {
		for _, ino := range inos {
			want[ino] = true
		}
	}
	tried := map[uint64]bool{}
	for _, ns := range read {
		tried[ns] = true
	}
	for i := 0; i < len(s.Processes) && len(want) > 0 && len(tried) < netnsPerCapture; i++ {
		pid := s.Processes[i].PID
		link, err := r.ReadlinkAt(cfg.rootfd, cfg.root, strconv.Itoa(pid)+"/ns/net")
		ns, ok := nsInode(link, "net")
		if err != nil || !ok || tried[ns] {
			continue
		}
		tried[ns] = true
		t, err := cfg.readNamespace(r, pid, ns, want)
		if err != nil {
			continue
		}
		for sf, inos := range unplaced {
			left := inos[:0]
			for _, ino := range inos {
				if t.give(sf, ino) {
					delete(want, ino)
				} else {
					left = append(left, ino)
				}
			}
			unplaced[sf] = left
			sortSockets(sf.p.Sockets)
		}
	}
	for sf, inos := range unplaced {
		if len(inos) > 0 {
			sf.p.Errors = append(sf.p.Errors, fmt.Sprintf("sockets: %d of its sockets are in no network namespace a process of the host is in (made in one since left), or past the %d namespaces read: their peers were not seen",
				len(inos), netnsPerCapture))
		}
	}
}
