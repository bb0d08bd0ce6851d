package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/snapshot"
)

// A GPU user can hand its traffic to a helper over a unix socket, which
// then holds the pool connection. The capture follows each GPU user's unix
// sockets one hop to the holder of the peer (sock_diag, UNIX_DIAG_PEER) and
// keeps that process's connections among the user's (via_pid). These bound
// it, since a tenant makes as many sockets as it likes.
const (
	// socketIndexEntries bounds the socket fds the scan remembers (inode
	// and holder) for peers to be found in.
	socketIndexEntries = 1 << 18
	// socketIndexPerProcess bounds what one process adds to the index.
	socketIndexPerProcess = 256
	// holdersPerSocket bounds the holders the index keeps for one socket.
	holdersPerSocket = 4
	// peersPerUser bounds the distinct helpers followed from one GPU user.
	peersPerUser = 16
	// unixDiagMessages bounds the unix sockets one namespace's dump reads.
	unixDiagMessages = 1 << 20
)

// socketIndex is the socket fds the scan saw, by inode, for the unix peers
// of GPU users to be found in without a second walk of every fd table.
type socketIndex struct {
	mu      sync.Mutex
	holders map[uint64][]int // socket inode to the PIDs holding it, the first few
	cut     map[uint64]bool  // socket inode to whether more processes hold it than holders keeps
	full    bool             // some socket fds were not indexed
	built   bool             // the /proc walk indexed fds (the BPF path does not)
}

// add indexes one process's socket inodes.
func (x *socketIndex) add(pid int, inodes []uint64, cut bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.full = x.full || cut
	if x.holders == nil {
		x.holders = map[uint64][]int{}
	}
	for _, ino := range inodes {
		h := x.holders[ino]
		switch {
		case slices.Contains(h, pid):
		case len(h) >= holdersPerSocket:
			if x.cut == nil {
				x.cut = map[uint64]bool{}
			}
			x.cut[ino] = true
		case len(x.holders) >= socketIndexEntries && h == nil:
			x.full = true
		default:
			x.holders[ino] = append(h, pid)
		}
	}
}

// noteSocket remembers a socket fd of the process being read, for add.
func (w *worker) noteSocket(target []byte) {
	if len(target) < len("socket:[0]") || string(target[:8]) != "socket:[" {
		return
	}
	if len(w.sockInodes) >= socketIndexPerProcess {
		w.sockCut = true
		return
	}
	if ino, ok := nsInode(string(target), "socket"); ok {
		w.sockInodes = append(w.sockInodes, ino)
	}
}

// unixMember is a GPU user's unix socket, by the namespace it lives in.
type unixMember struct {
	sf *sockFds
	u  unixSock
}

// unixPeersUnread says that the unix sockets of namespace ns could not be
// dumped (err), once in the scan's errors and once in the record of each
// user with sockets there, whose egress is then not known. A tenant makes
// as many sockets and processes as it likes, but each namespace costs it
// one. So the refusal is said once a namespace and once a user, never once
// a socket.
func unixPeersUnread(s *snapshot.Snapshot, ns uint64, err error, members []unixMember) {
	said := map[*sockFds]bool{}
	for _, m := range members {
		if !said[m.sf] {
			said[m.sf] = true
			m.sf.p.Errors = append(m.sf.p.Errors, fmt.Sprintf("sockets: unix peers in network namespace %d not followed (the scan's errors say why): egress not known", ns))
		}
	}
	s.Scan.Errors = append(s.Scan.Errors, fmt.Sprintf("sockets: unix peers in network namespace %d: %s (%d unix sockets of %d GPU users)", ns, errText(err), len(members), len(said)))
}

// followUnixPeers adds to each GPU user's sockets the connections of the
// processes at the other end of its unix sockets, one hop. A peer that no
// process read holds, or a namespace whose sockets could not be dumped, is
// an error of the user, whose egress is then not known.
func (cfg *scanConfig) followUnixPeers(r *procfs.Reader, s *snapshot.Snapshot, sfs []*sockFds) {
	if !cfg.live {
		return
	}
	// A socket lives in the namespace it was made in, which its process
	// may have left, so each is looked for in the dump of its own.
	byNS := map[uint64][]unixMember{}
	var order []uint64
	for _, sf := range sfs {
		for _, u := range sf.unix {
			if byNS[u.ns] == nil {
				order = append(order, u.ns)
			}
			byNS[u.ns] = append(byNS[u.ns], unixMember{sf, u})
		}
	}
	type hop struct {
		sf        *sockFds
		ino, peer uint64
	}
	var hops []hop
	want := map[uint64]bool{}
	for i, ns := range order {
		members := byNS[ns]
		if i >= netnsPerCapture {
			for _, m := range members {
				m.sf.p.Errors = append(m.sf.p.Errors, fmt.Sprintf("sockets: the peer of unix socket %d not followed: more than %d network namespaces", m.u.ino, netnsPerCapture))
			}
			continue
		}
		asked := map[uint64]bool{}
		for _, m := range members {
			asked[m.u.ino] = true
		}
		peers, err := cfg.unixPeers(members[0].u.pid, asked)
		if errors.Is(err, unix.EPERM) {
			err = errors.New("not followed (entering a network namespace needs CAP_SYS_ADMIN): a helper's connections are not seen")
		}
		if err != nil {
			unixPeersUnread(s, ns, err, members)
			continue
		}
		for _, m := range members {
			peer, listed := peers[m.u.ino]
			switch {
			case !listed:
				m.sf.p.Errors = append(m.sf.p.Errors, fmt.Sprintf("sockets: unix socket %d is not in the sock_diag dump of network namespace %d: its peer was not seen", m.u.ino, ns))
			case peer != 0 && !m.sf.inodes[peer]:
				// Not unconnected, nor a socketpair within the process, so a hop.
				hops = append(hops, hop{m.sf, m.u.ino, peer})
				want[peer] = true
			}
		}
	}
	if len(hops) == 0 {
		return
	}
	holders, cut, full := cfg.peerHolders(r, s, want)
	byPID := map[int]*snapshot.Process{}
	for i := range s.Processes {
		byPID[s.Processes[i].PID] = &s.Processes[i]
	}
	// Each user's helpers are the distinct holders of its peers, followed in
	// PID order so that the choice does not hang on map order, the first
	// peersPerUser of them. Past that its egress is not known, an error.
	cands := map[*sockFds][]int{}
	var users []*sockFds
	for _, h := range hops {
		if len(holders[h.peer]) == 0 {
			why := "held by no process the capture read"
			if full {
				why = "held by no process within what the capture looked through"
			}
			h.sf.p.Errors = append(h.sf.p.Errors, fmt.Sprintf("sockets: the peer of unix socket %d (socket %d) is %s: its connections were not seen", h.ino, h.peer, why))
			continue
		}
		if cut[h.peer] {
			h.sf.p.Errors = append(h.sf.p.Errors, fmt.Sprintf("sockets: the peer of unix socket %d (socket %d) is held by more than %d processes: the others' connections were not seen", h.ino, h.peer, holdersPerSocket))
		}
		if _, seen := cands[h.sf]; !seen {
			users = append(users, h.sf)
			cands[h.sf] = []int{}
		}
		for _, pid := range holders[h.peer] {
			if q := byPID[pid]; q != nil && q != h.sf.p && !slices.Contains(cands[h.sf], pid) {
				cands[h.sf] = append(cands[h.sf], pid)
			}
		}
	}
	helpers := map[int]*snapshot.Process{}
	var scratch []*snapshot.Process
	for _, sf := range users {
		pids := cands[sf]
		slices.Sort(pids)
		if len(pids) > peersPerUser {
			sf.p.Errors = append(sf.p.Errors, fmt.Sprintf("sockets: unix peers past %d not followed (%d processes hold them): egress not known", peersPerUser, len(pids)))
			pids = pids[:peersPerUser]
		}
		cands[sf] = pids
		for _, pid := range pids {
			if helpers[pid] == nil {
				q := byPID[pid]
				helpers[pid] = &snapshot.Process{PID: q.PID, StartTime: q.StartTime, LiveThread: q.LiveThread}
				scratch = append(scratch, helpers[pid])
			}
		}
	}
	// Every helper's internet sockets, into scratch records, each namespace
	// read once for all of them. Their own unix sockets are not followed
	// (one hop).
	cfg.placeSockets(r, s, scratch, "the holders of GPU users' unix peers")
	for _, sf := range users {
		for _, pid := range cands[sf] {
			giveVia(sf.p, helpers[pid])
		}
	}
	for _, sf := range sfs {
		sortSockets(sf.p.Sockets)
	}
}

// giveVia adds the connections of helper h to p's sockets, naming h.
func giveVia(p, h *snapshot.Process) {
	for _, so := range h.Sockets {
		if len(p.Sockets) >= SocketsPerProcess {
			p.SocketsDropped++
			continue
		}
		so.ViaPID, so.ViaStartTime = h.PID, h.StartTime
		p.Sockets = append(p.Sockets, so)
	}
	// A helper's error stays a sockets error of p, so that p's egress
	// is not known where the helper's sockets were not all read.
	for _, e := range h.Errors {
		p.Errors = append(p.Errors, "sockets: via pid "+strconv.Itoa(h.PID)+": "+strings.TrimPrefix(e, "sockets: "))
	}
}

// peerHolders finds the processes that hold the sockets in want, in the
// index the /proc walk built, or, after the BPF path (whose walk keeps
// device files alone), by reading fd tables until each is found. cut
// names the sockets whose holders were not all kept, full says some fds
// were not looked at.
func (cfg *scanConfig) peerHolders(r *procfs.Reader, s *snapshot.Snapshot, want map[uint64]bool) (holders map[uint64][]int, cut map[uint64]bool, full bool) {
	if cfg.socks.built {
		return cfg.socks.holders, cfg.socks.cut, cfg.socks.full
	}
	found := map[uint64][]int{}
	for i := 0; i < len(s.Processes) && len(found) < len(want); i++ {
		p := &s.Processes[i]
		if p.Defunct() {
			continue
		}
		q := &snapshot.Process{PID: p.PID, LiveThread: p.LiveThread}
		sf, err := cfg.socketFds(r, q)
		if err != nil {
			full = full || !errors.Is(err, unix.ENOENT)
			continue
		}
		full = full || len(q.Errors) > 0
		for ino := range sf.inodes {
			if want[ino] {
				found[ino] = append(found[ino], p.PID)
			}
		}
	}
	return found, nil, full
}

// unixPeers dumps the unix sockets of pid's network namespace through
// sock_diag, and returns the peer of each one asked for by inode (0 for none).
func (cfg *scanConfig) unixPeers(pid int, asked map[uint64]bool) (map[uint64]uint64, error) {
	fd, err := diagSocketIn(cfg.root + "/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	req := make([]byte, unix.NLMSG_HDRLEN+24)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:], 1)
	body := req[unix.NLMSG_HDRLEN:]
	body[0] = unix.AF_UNIX
	binary.NativeEndian.PutUint32(body[4:], 0xffffffff) // every state
	binary.NativeEndian.PutUint32(body[12:], udiagShowPeer)
	binary.NativeEndian.PutUint32(body[16:], 0xffffffff) // no cookie
	binary.NativeEndian.PutUint32(body[20:], 0xffffffff)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("sock_diag: %w", err)
	}
	peers := map[uint64]uint64{}
	buf := make([]byte, 1<<16)
	for n := 0; ; {
		k, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("sock_diag: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:k])
		if err != nil {
			return nil, fmt.Errorf("sock_diag: %w", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return peers, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if e := int32(binary.NativeEndian.Uint32(m.Data)); e < 0 {
						return nil, fmt.Errorf("sock_diag: %w", unix.Errno(-e))
					}
				}
				return nil, errors.New("sock_diag: an error message")
			}
			if n++; n > unixDiagMessages {
				return nil, fmt.Errorf("sock_diag: more than %d unix sockets", unixDiagMessages)
			}
			if ino, peer, ok := parseUnixDiag(m.Data); ok && asked[ino] {
				peers[ino] = peer
			}
		}
	}
}

// udiagShowPeer asks sock_diag for each unix socket's peer (UDIAG_SHOW_PEER),
// and unixDiagPeer is the attribute that carries it (UNIX_DIAG_PEER).
const (
	udiagShowPeer = 0x4
	unixDiagPeer  = 2
)

// parseUnixDiag reads a unix_diag_msg (family, type, state, pad, ino,
// cookie) and its attributes, the socket's inode and its peer's, 0 for
// none.
func parseUnixDiag(b []byte) (ino, peer uint64, ok bool) {
	const msgLen = 16
	if len(b) < msgLen {
		return 0, 0, false
	}
	ino = uint64(binary.NativeEndian.Uint32(b[4:]))
	for a := b[msgLen:]; len(a) >= unix.SizeofRtAttr; {
		l := int(binary.NativeEndian.Uint16(a))
		if l < unix.SizeofRtAttr || l > len(a) {
			break
		}
		if binary.NativeEndian.Uint16(a[2:]) == unixDiagPeer && l >= unix.SizeofRtAttr+4 {
			peer = uint64(binary.NativeEndian.Uint32(a[unix.SizeofRtAttr:]))
		}
		a = a[min(len(a), (l+3)&^3):]
	}
	return ino, peer, true
}

// diagSocketIn opens a sock_diag netlink socket in the network namespace
// of nsPath, as a socket belongs to the namespace it is made in. The thread
// that enters the namespace is locked and, should it fail to come back,
// ends with its goroutine, so no other code runs in the tenant's namespace.
func diagSocketIn(nsPath string) (int, error) {
	type made struct {
		fd  int
		err error
	}
	ch := make(chan made, 1)
	go func() {
		runtime.LockOSThread()
		fd, back, err := diagSocketInLocked(nsPath)
		if back {
			runtime.UnlockOSThread()
		}
		ch <- made{fd, err}
	}()
	m := <-ch
	return m.fd, m.err
}

// diagSocketInLocked is diagSocketIn on a locked thread. back reports that
// the thread is in its own namespace again.
func diagSocketInLocked(nsPath string) (fd int, back bool, err error) {
	own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, true, fmt.Errorf("own network namespace: %w", err)
	}
	defer unix.Close(own)
	target, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, true, fmt.Errorf("ns/net: %w", err)
	}
	defer unix.Close(target)
	var a, b unix.Stat_t
	same := unix.Fstat(own, &a) == nil && unix.Fstat(target, &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino
	if !same {
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			return -1, true, fmt.Errorf("setns: %w", err)
		}
	}
	fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if !same {
		if serr := unix.Setns(own, unix.CLONE_NEWNET); serr != nil {
			if err == nil {
				unix.Close(fd)
			}
			return -1, false, fmt.Errorf("setns back: %w", serr)
		}
	}
	if err != nil {
		return -1, true, fmt.Errorf("netlink socket: %w", err)
	}
	return fd, true, nil
}
