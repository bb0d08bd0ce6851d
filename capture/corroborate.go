package capture

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/provenance"
	"github.com/gpusnap/gpusnap/snapshot"
)

// Limits of what a capture reads to corroborate a GPU user, whose sockets,
// fds and network namespaces a tenant controls.
const (
	// SocketsPerProcess is how many sockets of one process a snapshot keeps.
	SocketsPerProcess = 256
	// netnsPerCapture is how many network namespaces' tables one capture reads.
	netnsPerCapture = 64
	// socketFdsPerProcess is how many fds of one process are looked at for
	// sockets. Each costs a readlink (docs/performance-notes.md has its
	// cost), and a tenant can hold a million.
	socketFdsPerProcess = 1 << 16
)

// netTables are the tables of a network namespace that name internet sockets.
var netTables = []string{"tcp", "tcp6", "udp", "udp6"}

// gpuUsers returns the processes of s that use a GPU. NVML lists them (by
// host PID or NSpid, as GPUUsage joins them), or they hold or map an NVIDIA
// device, or work on another accelerator (AcceleratorWork). A defunct
// process runs nothing and holds nothing, so it is left out.
func gpuUsers(s *snapshot.Snapshot) []*snapshot.Process {
	seen := map[*snapshot.Process]bool{}
	var out []*snapshot.Process
	add := func(p *snapshot.Process) {
		if p != nil && !seen[p] && !p.Defunct() {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, g := range snapshot.GPUUsage(s) {
		for _, u := range g.Processes {
			add(u.Process)
		}
	}
	for i := range s.Processes {
		if s.Processes[i].UsesNVIDIA() || s.Processes[i].AcceleratorWork(s.Accelerators) {
			add(&s.Processes[i])
		}
	}
	return out
}

// withCode is users and the other processes whose code an exe allow entry
// may be asked to vouch for, those that map a device or whose maps or fds
// could not be read (other_device_mapping, unreadable_process).
func withCode(s *snapshot.Snapshot, users []*snapshot.Process) []*snapshot.Process {
	out := slices.Clone(users)
	seen := map[*snapshot.Process]bool{}
	for _, p := range users {
		seen[p] = true
	}
	for i := range s.Processes {
		p := &s.Processes[i]
		if (len(p.Mappings) > 0 || len(p.Unreadable) > 0) && !p.Defunct() && !seen[p] {
			out = append(out, p)
		}
	}
	return out
}

// corroborate reads, for every process that uses a GPU and for no other,
// the evidence triage weighs beside its device use, that is its sockets,
// its lineage and its units. Its cost is bounded by the GPU users, not by the
// host. Its binary's hash and package and its foreign code are read for
// withCode's processes too, so that an exe allow entry vouches for no
// process whose code was not read.
func (cfg *scanConfig) corroborate(ctx context.Context, r *procfs.Reader, s *snapshot.Snapshot, opts Options) {
	s.Scan.CodeRead = cfg.live // readForeignCode reads the live /proc alone
	users := gpuUsers(s)
	coded := withCode(s, users)
	if len(coded) == 0 {
		return
	}
	if len(users) > 0 {
		cfg.readSockets(r, s, users)
		cfg.readLineage(r, s, users)
		units := opts.UnitRoot
		if units == "" && cfg.live {
			units = "/"
		}
		readUnits(units, users, &s.Scan)
	}
	dir := opts.DpkgDir
	if dir == "" && cfg.live {
		dir = provenance.DefaultDir
	}
	var dpkg *provenance.DB
	if dir != "" {
		var err error
		if dpkg, err = provenance.Open(dir); err != nil {
			s.Scan.Errors = append(s.Scan.Errors, err.Error())
		}
		defer dpkg.Close()
	}
	var known *binaryCache
	if cfg.live {
		var note string
		if known, note = loadBinaryCache(opts.BinaryCache); note != "" {
			s.Scan.Errors = append(s.Scan.Errors, note)
		}
	}
	cfg.readBinaries(coded, cmp.Or(opts.HashLimit, DefaultHashLimit), dpkg, known)
	cfg.readForeignCode(coded, dpkg, known)
	if dpkg != nil {
		s.Scan.Errors = append(s.Scan.Errors, dpkg.Notes...)
	}
	if note := known.save(ctx); note != "" {
		s.Scan.Errors = append(s.Scan.Errors, note)
	}
}

// sockFds lists the socket inodes of one process's fd table, and its
// network namespace's inode.
type sockFds struct {
	p      *snapshot.Process
	inodes map[uint64]bool
	netns  uint64
	unix   []unixSock // the sockets the tables placed as unix ones
}

// unixSock is a unix socket of a process, with the network namespace whose
// tables placed it (the one it was made in) and a process in that one.
type unixSock struct {
	ino, ns uint64
	pid     int
}

// readSockets joins each user's socket fds to its network namespace's
// tables, then follows its unix sockets one hop (followUnixPeers).
func (cfg *scanConfig) readSockets(r *procfs.Reader, s *snapshot.Snapshot, users []*snapshot.Process) {
	cfg.followUnixPeers(r, s, cfg.placeSockets(r, s, users, "GPU users"))
}

// placeSockets joins each of procs' socket fds to its network namespace's
// tables, each namespace read once for all of procs (keyed by its inode, as
// osquery does) and only for the inodes they hold. What it costs grows
// with the namespaces, not with the processes in one. who names procs in
// the scan's errors. It returns the socket fds of those that hold any.
func (cfg *scanConfig) placeSockets(r *procfs.Reader, s *snapshot.Snapshot, procs []*snapshot.Process, who string) []*sockFds {
	byNS := map[uint64][]*sockFds{}
	var order []uint64
	var all []*sockFds
	for _, p := range procs {
		sf, err := cfg.socketFds(r, p)
		if errors.Is(err, syscall.ENOENT) {
			// Gone since it was read, or a fixture tree that leaves out
			// what the process does not have (as for maps and fds).
			continue
		}
		if err != nil {
			p.Errors = append(p.Errors, "sockets: "+err.Error())
			continue
		}
		if len(sf.inodes) == 0 {
			continue
		}
		all = append(all, sf)
		if byNS[sf.netns] == nil {
			order = append(order, sf.netns)
		}
		byNS[sf.netns] = append(byNS[sf.netns], sf)
	}
	if len(order) > netnsPerCapture {
		s.Scan.Errors = append(s.Scan.Errors, fmt.Sprintf("sockets: %s live in %d network namespaces; the sockets of those past the first %d were not read", who, len(order), netnsPerCapture))
		for _, ns := range order[netnsPerCapture:] {
			for _, sf := range byNS[ns] {
				sf.p.Errors = append(sf.p.Errors, fmt.Sprintf("sockets: network namespace %d not read (more than %d in this capture)", ns, netnsPerCapture))
			}
		}
		order = order[:netnsPerCapture]
	}
	unplaced := map[*sockFds][]uint64{}
	for _, ns := range order {
		maps.Copy(unplaced, cfg.joinNamespace(r, ns, byNS[ns]))
	}
	if len(unplaced) > 0 {
		cfg.placeElsewhere(r, s, order, unplaced)
	}
	return all
}

// joinNamespace reads one network namespace's tables through the first of
// its members whose /proc/PID/net can be read, and gives each member its
// sockets. It returns the sockets it could not place there, by member.
func (cfg *scanConfig) joinNamespace(r *procfs.Reader, ns uint64, members []*sockFds) map[*sockFds][]uint64 {
	want := map[uint64]bool{}
	for _, sf := range members {
		for ino := range sf.inodes {
			want[ino] = true
		}
	}
	var t *nsTables
	var lastErr error
	for _, sf := range members {
		if t, lastErr = cfg.readNamespace(r, sf.p.PID, ns, want); lastErr == nil {
			break
		}
	}
	if t == nil {
		for _, sf := range members {
			sf.p.Errors = append(sf.p.Errors, fmt.Sprintf("sockets: network namespace %d: %s", ns, errText(lastErr)))
		}
		return nil
	}
	unplaced := map[*sockFds][]uint64{}
	for _, sf := range members {
		for ino := range sf.inodes {
			if !t.give(sf, ino) {
				unplaced[sf] = append(unplaced[sf], ino)
			}
		}
		sortSockets(sf.p.Sockets)
	}
	return unplaced
}

// socketFds reads the socket inodes of p's fd table (its live thread's,
// where the leader has exited) and the inode of its network namespace.
func (cfg *scanConfig) socketFds(r *procfs.Reader, p *snapshot.Process) (*sockFds, error) {
	dir := strconv.Itoa(p.PID)
	if p.LiveThread != 0 {
		dir += "/task/" + strconv.Itoa(p.LiveThread)
	}
	taskfd, err := r.OpenAt(cfg.rootfd, dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, true)
	if err != nil {
		return nil, err
	}
	defer r.Close(taskfd, true)
	path := cfg.root + "/" + dir
	nsLink, err := r.ReadlinkAt(taskfd, path, "ns/net")
	if err != nil {
		return nil, fmt.Errorf("ns/net: %w", err)
	}
	netns, ok := nsInode(nsLink, "net")
	if !ok {
		return nil, fmt.Errorf("ns/net: %q is no net:[INODE]", procfs.Truncate([]byte(nsLink), 64))
	}
	fdfd, err := r.OpenDirAt(taskfd, path, "fd")
	if err != nil {
		return nil, fmt.Errorf("fd: %w", err)
	}
	defer r.Close(fdfd, true)
	fds, err := r.ListInts(fdfd, nil, 0, 1<<31-1)
	if err != nil {
		return nil, fmt.Errorf("fd: %s", errText(err))
	}
	sf := &sockFds{p: p, inodes: map[uint64]bool{}, netns: netns}
	if len(fds) > socketFdsPerProcess {
		p.Errors = append(p.Errors, fmt.Sprintf("sockets: %d fds; those past the first %d were not looked at", len(fds), socketFdsPerProcess))
		fds = fds[:socketFdsPerProcess]
	}
	for _, fd := range fds {
		target, err := r.ReadlinkAt(fdfd, path+"/fd", strconv.Itoa(fd))
		if err != nil {
			if procfs.RefusedErr(err) {
				return nil, fmt.Errorf("fd: %s", errText(err))
			}
			continue // closed since the listing
		}
		if ino, ok := nsInode(target, "socket"); ok {
			sf.inodes[ino] = true
		}
	}
	return sf, nil
}

// nsInode reads the inode of a link target "KIND:[INODE]" (socket:[123],
// net:[4026531840]).
func nsInode(target, kind string) (uint64, bool) {
	rest, ok := strings.CutPrefix(target, kind+":[")
	if !ok || !strings.HasSuffix(rest, "]") {
		return 0, false
	}
	v, err := strconv.ParseUint(rest[:len(rest)-1], 10, 64)
	return v, err == nil
}

// sortSockets orders sockets by protocol and addresses, so that a
// snapshot reads the same however the fd table was walked.
func sortSockets(socks []snapshot.Socket) {
	slices.SortFunc(socks, func(a, b snapshot.Socket) int {
		return cmp.Or(cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Local, b.Local), cmp.Compare(a.Remote, b.Remote))
	})
}
