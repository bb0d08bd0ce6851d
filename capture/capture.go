package capture

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/bpf"
	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/kmsg"
	"github.com/gpusnap/gpusnap/snapshot"
)

// Version is gpusnap's version, recorded in every snapshot. The CLI sets it.
var Version = "dev"

// Options say where a capture reads from.
type Options struct {
	ProcRoot string // a directory laid out like /proc, where "" means /proc
	// NVML reads NVML's view beside the /proc walk (cmd passes an
	// nvmlread.Options). A nil NVML reads none, recorded as not read.
	NVML NVMLReader
	// KernelLog is the kernel log to record the position of, /dev/kmsg or a
	// file in its format. "" means /dev/kmsg when ProcRoot is this host's
	// procfs. Another proc root's host has another kernel log, so there ""
	// reads none.
	KernelLog string
	Label     string
	Tenant    string
	// Path chooses how processes are read, PathAuto (BPF iterators where
	// they load, else /proc), PathBPF (BPF or an error) or PathProc.
	Path string
	// HashLimit is the largest executable hashed (--hash-limit), where 0
	// means DefaultHashLimit.
	HashLimit int64
	// RefusalRecord is the file where auto remembers that the kernel
	// refused the BPF path for good, so that later captures this boot read
	// /proc at once (cmd puts it beside the store). "" remembers nothing.
	RefusalRecord string
	// RuntimeRefusalRecord is the record auto reads and writes before the
	// store's directory exists (a fresh host, --no-store). It lies in a
	// runtime directory, which a reboot empties, and "" is none.
	RuntimeRefusalRecord string
	// Warn, where not nil, is told in one line what the operator should hear
	// now and the snapshot only records, such as a refusal record ignored.
	Warn func(string)
	// DpkgDir is the dpkg database that names the package of each GPU
	// user's exe. "" means provenance.DefaultDir on the live procfs, and
	// none for another proc root (its host's database is not this one).
	DpkgDir string
	// BinaryCache is a file that keeps, from one capture to the next, the
	// GPU users' exe digests (by path, device, inode, size, mtime and
	// ctime) and their paths' dpkg owners (while the database's stamp
	// holds), so an unchanged binary is not read again. "" keeps none.
	BinaryCache string
	// ProcessCache is a file that keeps, from one /proc capture to the
	// next, what a process cannot change (its pid namespace and NSpid) with
	// what proves it the same process that did not exec (see
	// processCache). "" keeps none, and every process is read whole.
	ProcessCache string
	// UnitRoot is the root that systemd's unit directories (etc/systemd/system,
	// usr/lib/systemd/system ...) lie under, read for the Restart= and timer
	// of each GPU user's unit. "" means / on the live procfs, and none for
	// another proc root.
	UnitRoot string
	// SysRoot is a directory laid out like /sys, where the accelerators
	// other than NVIDIA's are read (capture/accel). "" means /sys on the
	// live procfs, and none for another proc root.
	SysRoot string
	// GPUIdentityOnly is the gate's capture (check). On the /proc path, a
	// process that holds and maps no device but a terminal or a memory
	// device (null, zero, random) is read for its stat, maps and fds alone.
	// Who the others are (exe, command line, cgroup, credentials) is read
	// in full, as are the processes NVML or KFD lists and the ancestors of
	// every GPU user. A process whose maps or fds could not be read in full
	// is read whole, so what was not seen is still said. The process cache
	// is neither read nor written.
	GPUIdentityOnly bool

	noCorroborate bool // a benchmark's capture without triage's reads
}

// Capture reads the host now, every process under the proc root, and NVML.
// An unreadable proc root is an error, while a process that vanishes or
// refuses a read is recorded in Scan and the capture goes on.
func Capture(ctx context.Context, opts Options) (*snapshot.Snapshot, error) {
	return capture(ctx, opts, nil)
}

// capture is Capture with a fault hook for tests (see reader.faults).
func capture(ctx context.Context, opts Options, faults func(string) error) (*snapshot.Snapshot, error) {
	start := time.Now()
	root := opts.ProcRoot
	if root == "" {
		root = "/proc"
	}
	s := &snapshot.Snapshot{ID: snapshot.NewID(start), Label: opts.Label, Tenant: opts.Tenant}
	s.Host.CaptureStart = start
	s.Host.GpusnapVersion = Version
	s.Host.ProcRoot = root

	// NVML answers at the driver's pace (its init alone can take longer
	// than the /proc walk on a GPU host). So it is read beside /proc, and
	// waited for on every return, up to its own timeout, or until the
	// capture is cancelled (SIGTERM), since a hung driver must not outlive it.
	var nv snapshot.NVML
	var nvErr error
	nvDone := make(chan struct{})
	go func() {
		defer close(nvDone)
		nv, nvErr = readNVML(opts.NVML)
	}()
	defer func() {
		select {
		case <-nvDone:
		case <-ctx.Done():
		}
	}()
	// The kernel log is read beside /proc too, at one read(2) per record.
	var kernelLog snapshot.KernelLogPosition
	klDone := make(chan struct{})
	go func() {
		defer close(klDone)
		kernelLog = readKernelLog(opts.KernelLog, root)
	}()
	defer func() { <-klDone }()

	cfg, r, errs, err := openScan(root, faults, &s.Host)
	if err != nil {
		return nil, err
	}
	defer unix.Close(cfg.rootfd)
	s.Scan.Errors = append(s.Scan.Errors, errs...)
	pids, err := r.ListPIDs(cfg.rootfd)
	if err != nil {
		return nil, fmt.Errorf("proc root: %s: %s", root, errText(err))
	}
	if len(r.BadNames) > 0 {
		s.Scan.Errors = append(s.Scan.Errors, fmt.Sprintf("proc root: %s: ignored entries that are no PID (a leading zero, 0, or %d and above): %q", root, procfs.PIDMax, r.BadNames))
	}
	if len(pids) == 0 {
		// gpusnap itself is a process, so a root without one is a mistyped
		// path, and a baseline of nothing would hide everything a diff finds.
		return nil, fmt.Errorf("proc root: %s holds no process directories (is it a /proc?)", root)
	}
	slices.Sort(pids)
	cfg.glance = opts.GPUIdentityOnly
	if cfg.live && cfg.ownPIDs && !cfg.glance {
		var note string
		if cfg.procCache, note = loadProcessCache(opts.ProcessCache, s.Host.BootID, cfg.rootNS); note != "" {
			s.Scan.Errors = append(s.Scan.Errors, note)
		}
	}
	results, err := cfg.scanPath(ctx, opts.Path, newRefusalMemory(opts, &s.Host), pids, &s.Scan)
	if err != nil {
		return nil, err
	}
	if results, err = cfg.settle(ctx, pids, results, &s.Scan); err != nil {
		return nil, err
	}
	if s.Scan.CapturePath == PathProc && !cfg.glance {
		if note := cfg.procCache.save(ctx, results); note != "" {
			s.Scan.Errors = append(s.Scan.Errors, note)
		}
	}
	cfg.keepProcesses(r, results, s)
	s.Scan.ProcessesRead = len(s.Processes)
	if err := cfg.readAccelerators(r, s, sysRoot(opts.SysRoot, root)); err != nil {
		return nil, err
	}

	select {
	case <-nvDone:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if nvErr != nil {
		return nil, nvErr
	}
	s.NVML = nv
	cfg.fillIdentity(ctx, results, s)
	if !opts.noCorroborate {
		cfg.corroborate(ctx, r, s, opts) // once NVML has named the GPU users
	}
	<-klDone
	kernelLog.BootID = s.Host.BootID
	s.KernelLog = &kernelLog
	s.Host.CaptureEnd = time.Now()
	return s, nil
}

// keepProcesses makes the scan's results s's processes. A process that
// vanished or hid is counted (the BPF walk's hidden ones kept, with what it
// read beneath the mount), a refused one counted and kept.
func (cfg *scanConfig) keepProcesses(r *procfs.Reader, results []result, s *snapshot.Snapshot) {
	s.Processes = make([]snapshot.Process, 0, len(results))
	for _, res := range results {
		switch {
		case res.vanished || res.hidden != "":
			hidden := cfg.hidden(r, res, &s.Scan)
			if hidden && res.hidden != "" && (len(res.p.Mappings) > 0 || len(res.p.Holders) > 0) {
				// The BPF path's walk read these in the kernel, beneath
				// any mount, so they are kept, with nothing of the tree.
				break
			}
			if !hidden {
				s.Scan.Vanished++
				s.Scan.VanishedPIDs = append(s.Scan.VanishedPIDs, res.p.PID)
			}
			continue
		case res.refused:
			s.Scan.Refused++
			s.Scan.RefusedPIDs = append(s.Scan.RefusedPIDs, res.p.PID)
		}
		if len(res.p.Unreadable) > 0 {
			s.Scan.Unreadable++
		}
		makeValidUTF8(&res.p)
		s.Processes = append(s.Processes, res.p)
	}
}

// readKernelLog reads where the kernel log at path stands (see Options.KernelLog).
func readKernelLog(path, root string) snapshot.KernelLogPosition {
	if path == "" {
		if !isProcfs(root) {
			return snapshot.KernelLogPosition{Unavailable: "not read: the proc root " + root + " is not this host's procfs, whose kernel log /dev/kmsg is (give --kmsg FILE)"}
		}
		path = kmsg.DefaultPath
	}
	return kmsg.ReadPosition(path)
}

// scanPath reads the processes by the path asked for, and records in scan
// the path taken and how, or why BPF was not taken where it was wanted.
func (cfg *scanConfig) scanPath(ctx context.Context, path string, mem *refusalMemory, pids []int, scan *snapshot.Scan) ([]result, error) {
	switch path {
	case PathAuto, PathBPF:
		if path == PathAuto && cfg.root != "/proc" {
			break // a tree laid out like /proc, with nothing to choose
		}
		results, why, err := cfg.tryBPF(ctx, path, mem, pids, scan)
		if err != nil || why == "" {
			return results, err
		}
		if path == PathBPF {
			return nil, fmt.Errorf("BPF capture: %s", why)
		}
		scan.CaptureNote = "BPF capture not taken: " + why
	case PathProc:
	default:
		return nil, fmt.Errorf("capture path %q: want bpf or proc", path)
	}
	scan.CapturePath = PathProc
	cfg.socks.built = true // the /proc walk reads every fd link, so it indexes the sockets
	return cfg.scan(ctx, pids)
}

// tryBPF reads the processes by the BPF path, or says why it did not. Auto
// does not try where mem recalls the kernel's refusal. A lasting refusal
// (bpf.Refused) is remembered, and a record that BPF then proves wrong is
// forgotten. Only the load is judged, and a walk that fails is tried again.
func (cfg *scanConfig) tryBPF(ctx context.Context, path string, mem *refusalMemory, pids []int, scan *snapshot.Scan) (results []result, why string, err error) {
	why = bpfUnavailable(cfg.root)
	if why == "" && cfg.faults != nil {
		why = "a test's fault hook reads /proc"
	}
	if why != "" {
		return nil, why, nil
	}
	known := mem.recall(scan)
	if known != nil && path == PathAuto {
		return nil, mem.note(known), nil
	}
	walk, err := openWalk()
	if err != nil {
		why = err.Error()
		if bpf.Refused(err) {
			if err := mem.remember(ctx, why); err != nil {
				why += " (not remembered: " + err.Error() + ")"
			}
		}
	} else {
		watch := cfg.watchMounts()
		results, err = cfg.scanBPF(ctx, walk, pids, watch)
		walk.Close()
		watch.close()
		how := ""
		if errors.Is(err, errMountsMoved) {
			// What the fill-in read proves nothing, so the walk is taken
			// again, with each directory proven.
			if walk, err = openWalk(); err == nil {
				results, err = cfg.scanBPF(ctx, walk, pids, nil)
				walk.Close()
				how = ", walked again with each directory proven (a mount was made or removed during the fill-in)"
			}
		}
		if err == nil {
			scan.CapturePath, scan.CaptureNote = PathBPF, walk.How+how
			mem.forget()
			return results, "", nil
		}
		why = err.Error()
	}
	if ctx.Err() != nil {
		return nil, "", ctx.Err()
	}
	return nil, why, nil
}

// result is one process as a worker left it.
type result struct {
	p        snapshot.Process
	vanished bool
	refused  bool
	// exiting says the process had begun to exit as it was read
	// (PF_EXITING). It maps and holds nothing any more, and a successor it
	// forked may be what uses its devices now.
	exiting bool
	// glanced says only stat, maps and fds were read (scanConfig.glance).
	glanced bool
	// hidden says how the process's directory lies on another filesystem
	// than the proc root's (a mount over /proc/PID), and nothing in it was
	// read. On the /proc path such a process is also vanished, while the
	// BPF path keeps what its walk saw.
	hidden string
	// cache is what this read proved of the process for the next
	// capture's process cache, nil where it proved nothing.
	cache *cachedIdentity
}

// scanConfig is what every worker of one capture shares.
type scanConfig struct {
	root    string
	rootfd  int // root, open (O_PATH), in which process directories are opened
	classes snapshot.DeviceClasses
	boot    time.Time
	live    bool   // root is procfs, where stat of map_files and fd links is the truth
	rootDev uint64 // st_dev of the live procfs, every process directory's
	// ownPIDs says root is the procfs of this process's pid namespace, whose
	// PIDs kcmp takes (threads' own fd tables are looked for only then).
	ownPIDs bool
	faults  func(string) error
	users   *userCache // nil unless live, as another machine's uids get no names
	// rootNS is the proc root's pid namespace (its ns/pid link), where it
	// is the capture's own, or "" where not known.
	rootNS string
	// glance says the /proc walk reads who a process is only where it uses a
	// device (Options.GPUIdentityOnly).
	glance bool
	// procCache is the last capture's identities. A nil one reads every
	// process whole.
	procCache *processCache
	// socks is the socket fds the scan saw, for unix peers (followUnixPeers).
	socks socketIndex
}

// scan reads the processes with one worker per CPU, as the kernel's work of
// generating maps and fd links dominates, and runs in parallel.
func (cfg *scanConfig) scan(ctx context.Context, pids []int) ([]result, error) {
	results := make([]result, len(pids))
	var next int
	var mu sync.Mutex
	var wg sync.WaitGroup
	workers := min(runtime.NumCPU(), len(pids))
	for range workers {
		wg.Go(func() {
			w := newWorker(cfg)
			for ctx.Err() == nil {
				// Hand out PIDs in small batches, one lock per batch, not per process.
				mu.Lock()
				lo := next
				next = min(next+8, len(pids))
				mu.Unlock()
				if lo >= len(pids) {
					return
				}
				for i := lo; i < min(lo+8, len(pids)); i++ {
					results[i] = w.read(pids[i], cfg.glance)
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return results, nil
}

// worker reads processes one at a time with reused buffers.
type worker struct {
	*scanConfig
	r    *procfs.Reader
	maps procfs.MapsScanner
	// kinds caches stat of map_files by the maps dev field and inode. Every
	// process maps the same libraries, and one stat per file (not per line
	// per process) keeps "stat decides" affordable. An entry answers only
	// for the same path in the same mount namespace (mntOf).
	kinds map[fileID]knownFile
	// mnt is the ns/mnt link of the process being read, once read (mntRead).
	mnt     string
	mntRead bool
	// sockInodes are the socket fds of the process being read, for the
	// socket index. sockCut says some were left out.
	sockInodes []uint64
	sockCut    bool
	// rootNS is the pid namespace procfs was mounted in, once seen.
	rootNS string
	// noPidfdInfo says the kernel has no PIDFD_GET_INFO (before Linux 6.13),
	// and status gives every process's uids (credentials).
	noPidfdInfo bool
	// cgroups keeps each distinct cgroup text parsed, so that the many
	// processes of one cgroup set are parsed once (see cgroupOf).
	cgroups map[string]*cgroupSet
	// dir is the directory of the process being read, open as dirfd
	// (O_PATH), and its files are opened relative to it.
	dir   string
	dirfd int

	// Buffers are kept until the process is done, as its raw text is copied
	// out only if it uses an NVIDIA device.
	mapsBuf, statusBuf, cmdBuf []byte
	rawMaps                    []byte // the first TextLimit bytes of a maps text scanned as read
	ring                       []byte // an io_uring's fdinfo
	small                      []byte // stat, cgroup and fdinfo, parsed at once
	fds, tids                  []int
	holderRuns                 holderRuns        // of the process being read
	otherHolders               []snapshot.Holder // holders' scratch
}

type fileID struct {
	major, minor uint32
	inode        uint64
}

// knownFile is what stat said of a file, with the path maps gave it and the
// mount namespace of the process that mapped it. One maps dev field can
// stand for files of several filesystems whose inode numbers repeat
// (overlayfs layers, btrfs subvolumes), and a tenant's device node could
// otherwise pass for a library another process maps.
type knownFile struct {
	path, mnt string
	kind      snapshot.FileKind
}

func newWorker(cfg *scanConfig) *worker {
	w := &worker{
		scanConfig: cfg,
		r:          procfs.NewReader(cfg.faults, cfg.live, !cfg.live),
		kinds:      map[fileID]knownFile{},
		rootNS:     cfg.rootNS,
		cgroups:    map[string]*cgroupSet{},
		mapsBuf:    make([]byte, 64<<10), statusBuf: make([]byte, 4096), cmdBuf: make([]byte, 4096), small: make([]byte, 4096),
	}
	w.maps.Classes = cfg.classes
	if cfg.live {
		w.maps.Known = w.knownKind
	}
	return w
}

// process reads one process. Files are read in the order that lets it stop
// early, stat first (no stat, no process), maps and fds last. The identity
// step reads who the process is, the devices step what it maps and holds,
// and then who it runs as.
func (w *worker) process(pid int) result { return w.read(pid, false) }

// read is process, where glance first reads the process as glance does and
// reads it whole only where that is not all there is to read.
func (w *worker) read(pid int, glance bool) result {
	res := result{p: snapshot.Process{PID: pid}}
	w.dir = procfs.PIDDir(w.root, pid)
	w.sockInodes, w.sockCut = w.sockInodes[:0], false
	defer func() {
		if len(w.sockInodes) > 0 || w.sockCut {
			w.socks.add(pid, w.sockInodes, w.sockCut)
		}
	}()
	dirfd, hidden, err := w.openProcessDir(strconv.Itoa(pid))
	if err != nil {
		if procfs.VanishedErr(err) {
			res.vanished = true
			return res
		}
		w.note(&res, "dir", err)
		return res
	}
	defer w.r.Close(dirfd, true)
	w.dirfd = dirfd
	if res.hidden = hidden; res.hidden != "" {
		// A tenant's tree in the process's place. None of it is the
		// process's, which is as good as gone unless probed (hidden).
		res.vanished = true
		return res
	}
	if glance {
		if w.glance(&res) {
			return res
		}
		res = result{p: snapshot.Process{PID: pid}}
		w.sockInodes, w.sockCut = w.sockInodes[:0], false
	}
	id, done := w.identity(&res)
	if id.threadfd >= 0 {
		defer w.r.Close(id.threadfd, true)
	}
	if id.pidfd >= 0 {
		defer w.r.Close(id.pidfd, true)
	}
	if !done {
		w.devices(&res, &id)
		res.cache = w.provenIdentity(&res, &id)
	}
	return res
}

// provenIdentity is what the next capture may take from this read of the
// process, or nil where the process cache is off, its stat had no exec
// marks, or a read failed.
func (w *worker) provenIdentity(res *result, id *identity) *cachedIdentity {
	p := &res.p
	if w.procCache == nil || !id.marks.Known() || p.LiveThread != 0 || res.vanished || len(p.Errors) > 0 || p.PIDNamespace == "" {
		return nil
	}
	if id.known != nil {
		return id.known
	}
	return &cachedIdentity{marks: id.marks, comm: p.Comm, exe: id.exe, nspid: slices.Clone(p.NSpid), pidNS: p.PIDNamespace}
}

// openProcessDir opens the directory of process name in the proc root
// (O_PATH) and says how it lies on another filesystem than the root's
// (otherFS). On the live procfs the open refuses to cross a mount
// (RESOLVE_NO_XDEV), proving the directory the root's own without an fstat.
// One with a mount over it is opened again and looked at.
func (w *worker) openProcessDir(name string) (dirfd int, hidden string, err error) {
	if w.live && !w.r.NoOpenat2 {
		dirfd, err = w.r.OpenNoXdev(w.rootfd, name)
		if err == nil || !errors.Is(err, syscall.EXDEV) && !w.r.NoOpenat2 {
			return dirfd, "", err
		}
	}
	if dirfd, err = w.r.OpenAt(w.rootfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, true); err != nil {
		return -1, "", err
	}
	return dirfd, w.otherFS(dirfd), nil
}

// note records a failed read of the process being read, and reports
// whether the process is gone.
func (w *worker) note(res *result, what string, err error) bool {
	if procfs.VanishedErr(err) && w.gone() {
		res.vanished = true
		return true
	}
	if procfs.RefusedErr(err) {
		res.refused = true
	}
	// A file that is not there is not one that could not be read, as a
	// fixture tree leaves out what a process does not have.
	if (what == "maps" || what == "fd") && !errors.Is(err, syscall.ENOENT) {
		res.p.Unreadable = append(res.p.Unreadable, what)
	}
	res.p.Errors = append(res.p.Errors, what+": "+errText(err))
	return false
}

// identity is what the identity step hands the devices step, where the
// leader's files are, and the raw text kept for a process that uses an
// NVIDIA device.
type identity struct {
	leaderfd  int
	leaderDir string
	// threadfd is a zombie leader's live thread's task directory, open
	// (O_PATH) until the process is done, or -1 when none was opened.
	threadfd        int
	status          []byte
	cmdline, cgroup string
	cmdlineCut      *snapshot.Cut
	exe             string           // the exe link's text
	marks           procfs.ExecMarks // stat's
	// known is the process cache's identity of the process where stat and
	// exe prove it still holds. pidfd is then a pidfd of the process
	// opened before its maps were read (-1 when none).
	known    *cachedIdentity
	pidfd    int
	mapsRead bool // maps were read through the process's directory
}

// statIdentity reads the process's stat, its identity (PID and start
// time), name, state and parent. done is as identity's.
func (w *worker) statIdentity(res *result) (id identity, done bool) {
	p := &res.p
	dirfd := w.dirfd
	id = identity{leaderfd: dirfd, leaderDir: w.dir, threadfd: -1, pidfd: -1}
	data, err := w.r.ReadTaskFileAt(dirfd, w.dir, "stat", w.small)
	w.small = data
	if err != nil {
		// Without stat there is no identity (no start time). A process whose
		// stat is gone has exited between the listing and now.
		if procfs.VanishedErr(err) {
			res.vanished = true
			return id, true
		}
		w.note(res, "stat", err)
		return id, true
	}
	var flags uint64
	if st, err := procfs.ParseStat(data); err != nil {
		p.Errors = append(p.Errors, "stat: "+err.Error())
	} else {
		if w.live && st.PID != p.PID {
			// Another process's directory is bound over this one's. Nothing
			// in it is this process's, which is as good as gone unless probed.
			res.hidden = boundOver(st.PID)
			res.vanished = true
			return id, true
		}
		p.Comm, p.State, p.Threads, p.PPID, p.StartTime, flags = st.Comm, st.State, st.Threads, st.PPID, st.StartTime, st.Flags
		id.marks = st.Marks
		res.exiting = flags&procfs.PFExiting != 0
		if !w.boot.IsZero() {
			p.Started = snapshot.StartedAt(w.boot, st.StartTime)
		}
	}

	// A kernel thread (PF_KTHREAD, which only the kernel sets) has no
	// command line and no exe, and maps, holds and belongs to nothing worth a
	// read, as it runs as root in the root cgroup. Nothing more is read for it.
	if flags&procfs.PFKthread != 0 {
		p.KernelThread = true
		p.User = w.users.name(0)
		return id, true
	}
	return id, false
}

// identity reads who the process is (stat, cmdline, exe, cgroup) from
// w.dirfd. Who it runs as is read once its fds are (credentials). done says
// nothing more is to be read, as the process is gone, has no stat, or is a
// kernel thread.
func (w *worker) identity(res *result) (id identity, done bool) {
	if id, done = w.statIdentity(res); done {
		return id, true
	}
	p := &res.p
	dirfd := w.dirfd

	// A leader that has exited while its other threads run is a zombie
	// whose /proc/PID shows no command line, exe, maps or fds, so they are
	// read through a live thread (task/TID). Its status stays the leader's,
	// since a thread's NSpid would name the thread.
	if p.State == "Z" && p.Threads > 1 {
		if tid, tfd, ok := w.liveThread(p.PID); ok {
			id.threadfd = tfd
			p.LiveThread = tid
			w.dirfd, w.dir, dirfd = tfd, w.dir+"/task/"+strconv.Itoa(tid), tfd
		}
	}

	exe, err := w.r.ReadlinkAt(dirfd, w.dir, "exe")
	noExe := errors.Is(err, syscall.ENOENT)
	switch {
	case err == nil:
		id.exe = exe
		p.Exe, p.ExeDeleted = procfs.CutDeletedString(exe)
	case noExe && w.gone():
		res.vanished = true
		return id, true
	case !noExe: // ENOENT is a zombie's, with no exe to have
		w.note(res, "exe", err)
	}
	if w.commandLine(res, &id, err == nil) {
		return id, true
	}

	cg, err := w.r.ReadWholeAt(dirfd, w.dir, "cgroup", w.small)
	w.small = cg
	if err != nil && w.note(res, "cgroup", err) {
		return id, true
	}
	set := w.cgroupOf(cg)
	id.cgroup = set.text
	setCgroups(p, set)
	return id, false
}

// commandLine reads the process's command line, every time, since a process
// can write over its arguments in place (setproctitle) without an exec, and
// the kernel shows that memory as it is now. Where the process's stat marks and
// comm and its exe link (exeRead) are those the last capture saw, the
// process cache's identity is taken (id.known). It reports whether the
// process is gone.
func (w *worker) commandLine(res *result, id *identity, exeRead bool) (gone bool) {
	p := &res.p
	if known := w.procCache.recall(procKey{p.PID, p.StartTime}, procfs.Stat{Comm: p.Comm, Marks: id.marks}); exeRead && known != nil && known.exe == id.exe && p.LiveThread == 0 {
		id.known = known
		id.pidfd = w.pidfdOf(p)
	}
	cmdline, cut, err := w.r.ReadCappedAt(w.dirfd, w.dir, "cmdline", w.cmdBuf, snapshot.CmdlineLimit, true)
	w.cmdBuf = cmdline
	if err != nil && w.note(res, "cmdline", err) {
		return true
	}
	id.cmdline, id.cmdlineCut = string(cmdline), cut
	p.Cmdline, p.CmdlineCut = procfs.ParseCmdline(id.cmdline), id.cmdlineCut
	return false
}

// credentials reads who the process runs as (uids, NSpid, pid namespace) and
// keeps the status text of a process that uses an NVIDIA device. Where
// pidfdCreds can, the uids come from a pidfd and only the ns/pid link is
// read, because status is the costliest file the kernel renders. It reports
// whether the process is gone.
func (w *worker) credentials(res *result, id *identity) (gone bool) {
	p := &res.p
	ns := ""
	if uid, euid, ok := w.pidfdCreds(p, id.pidfd); ok {
		if id.known != nil && id.pidfd >= 0 && id.mapsRead {
			// The pidfd was opened before the maps were read through the
			// directory open since before. That they read proves it this
			// process's, whose pid namespace and NSpid no call changes.
			p.UID, p.EUID, p.NSpid, p.PIDNamespace = uid, euid, slices.Clone(id.known.nspid), id.known.pidNS
			p.User = w.users.name(uid)
			return false
		}
		// The link is read after the pidfd was opened, through the
		// directory open since before. That it reads proves the PID was
		// still this process's when the pidfd took it (a PID is reused
		// only once its process is reaped, and its directory then reads
		// nothing).
		link, err := w.r.ReadlinkBytesAt(w.dirfd, w.dir, "ns/pid")
		switch {
		case err == nil && string(link) == w.rootNS:
			p.UID, p.EUID, p.NSpid, p.PIDNamespace = uid, euid, []int{p.PID}, w.rootNS
			p.User = w.users.name(uid)
			return false
		case err == nil:
			ns = string(link) // another pid namespace, whose NSpid is in status
		case procfs.VanishedErr(err) && w.gone():
			res.vanished = true
			return true
		}
		// Refused (no ptrace access without root), and status says it all.
	}
	status, err := w.r.ReadTaskFileAt(id.leaderfd, id.leaderDir, "status", w.statusBuf)
	w.statusBuf, id.status = status, status
	if err != nil {
		if w.note(res, "status", err) {
			return true
		}
	} else if st, err := procfs.ParseStatus(status); err != nil {
		p.Errors = append(p.Errors, "status: "+err.Error())
	} else {
		p.UID, p.EUID, p.NSpid = st.UID, st.EUID, st.NSpid
		p.User = w.users.name(st.UID)
	}
	return w.pidNamespace(res, ns)
}

// pidfdCreds reads the real and effective uid of process p from a pidfd
// (PIDFD_GET_INFO, Linux 6.13), sparing the rendering of status. It works
// only on the procfs of gpusnap's own pid namespace, and not for a leader
// read through a live thread or an NVIDIA device user, whose status text is
// kept. ok is false where status is needed.
func (w *worker) pidfdCreds(p *snapshot.Process, pidfd int) (uid, euid int, ok bool) {
	if w.noPidfdInfo || w.rootNS == "" || !w.ownPIDs || p.LiveThread != 0 || p.UsesNVIDIA() {
		return 0, 0, false
	}
	if pidfd < 0 {
		if pidfd = w.pidfdOf(p); pidfd < 0 {
			return 0, 0, false
		}
		defer w.r.Close(pidfd, true)
	}
	info, err := w.r.PidfdInfo(pidfd)
	if errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.ENOTTY) || errors.Is(err, syscall.EINVAL) {
		w.noPidfdInfo = true // no pidfd_open, or no PIDFD_GET_INFO, so not asked again
	}
	if err != nil || info.Mask&unix.PIDFD_INFO_CREDS == 0 {
		return 0, 0, false
	}
	return int(info.Ruid), int(info.Euid), true
}

// pidfdOf opens a pidfd of process p where credentials may read its uids
// from one (see pidfdCreds), or -1 where not.
func (w *worker) pidfdOf(p *snapshot.Process) int {
	if w.noPidfdInfo || w.rootNS == "" || !w.ownPIDs || p.LiveThread != 0 {
		return -1
	}
	fd, err := w.r.PidfdOpen(p.PID)
	if errors.Is(err, syscall.ENOSYS) {
		w.noPidfdInfo = true
	}
	if err != nil {
		return -1
	}
	return fd
}

// pidNamespace records the process's pid namespace, ns where the caller
// read it already, else read from the process's directory. It reports
// whether the process is gone.
func (w *worker) pidNamespace(res *result, ns string) (gone bool) {
	p := &res.p
	// NSpid counts pid namespaces from the one procfs was mounted in. A
	// process with one entry lives in that namespace, as most do, and the
	// link need not be read again for it.
	if ns == "" && w.live && len(p.NSpid) == 1 && w.rootNS != "" {
		p.PIDNamespace = w.rootNS
		return false
	}
	if ns == "" {
		var err error
		if ns, err = w.r.ReadlinkAt(w.dirfd, w.dir, "ns/pid"); err != nil {
			return w.note(res, "ns/pid", err)
		}
	}
	p.PIDNamespace = ns
	if w.live && len(p.NSpid) == 1 {
		w.rootNS = ns
	}
	return false
}

// devices reads what the process maps and holds (maps, then its fds and,
// for a process of gpusnap's own, its threads'), then its credentials, and
// keeps the raw text of one that uses an NVIDIA device.
func (w *worker) devices(res *result, id *identity) {
	p := &res.p
	mr, maps, mapsCut, gone := w.readDevices(res, id)
	if gone || w.credentials(res, id) {
		return
	}

	if p.UsesNVIDIA() {
		p.SuspectAnon = mr.SuspectAnon
		if mr.AnonRun != nil {
			p.MappingRuns = append(p.MappingRuns, *mr.AnonRun)
		}
		p.Raw = newRaw(maps, mapsCut, id.status, id.cmdline, id.cmdlineCut, id.cgroup)
	}
}

// readDevices reads what the process maps and holds (maps, then its fds
// and, for a process of gpusnap's own, its threads'). It returns the maps
// read and reports whether the process is gone.
func (w *worker) readDevices(res *result, id *identity) (mr procfs.MapsResult, maps []byte, mapsCut *snapshot.Cut, gone bool) {
	p := &res.p
	mr, maps, mapsCut, err := w.readMaps()
	if err != nil && w.note(res, "maps", err) {
		return mr, maps, mapsCut, true
	}
	id.mapsRead = err == nil
	// A user process always maps its executable, so empty maps mean its memory
	// was torn down between the stat read and now, as an exiting process's
	// is, so what it mapped was not seen (the settle step looks again).
	if err == nil && len(maps) == 0 {
		res.exiting = true
	}
	p.Mappings, p.MappingRuns = mr.Mappings, mr.Runs
	p.Errors = append(p.Errors, mr.Errors...)

	w.holderRuns.runs.Reset()
	hs, errs, err := w.holders(w.dirfd, w.dir)
	p.Holders = hs
	p.Errors = append(p.Errors, errs...)
	gone = err != nil && w.note(res, "fd", err)
	if !gone && w.ownPIDs && p.Threads > 1 {
		hs, errs, err := w.threadHolders(id.leaderfd, id.leaderDir, p.PID, p.LiveThread)
		if len(hs) > 0 {
			p.Holders = nvidiaFirst(append(p.Holders, hs...), func(h snapshot.Holder) bool { return h.Class == snapshot.ClassNVIDIA })
		}
		p.Errors = append(p.Errors, errs...)
		gone = err != nil && w.note(res, "fd", err)
	}
	p.HolderRuns = w.holderRuns.runs.Result()
	return mr, maps, mapsCut, gone
}

// liveThread finds a thread of process pid other than its exited leader that
// still runs, and opens its task directory (O_PATH) relative to the
// process's. ok is false when every thread is gone or the kernel refuses.
func (w *worker) liveThread(pid int) (tid, fd int, ok bool) {
	taskfd, err := w.r.OpenDirAt(w.dirfd, w.dir, "task")
	if err != nil {
		return 0, -1, false
	}
	defer w.r.Close(taskfd, true)
	tids, err := w.r.ListInts(taskfd, nil, 1, procfs.PIDMax-1)
	if err != nil {
		return 0, -1, false
	}
	for _, tid := range tids {
		if tid == pid {
			continue
		}
		name := strconv.Itoa(tid)
		data, err := w.r.ReadTaskFileAt(taskfd, w.dir+"/task", name+"/stat", w.small)
		w.small = data
		if err != nil {
			continue
		}
		if st, err := procfs.ParseStat(data); err != nil || st.State == "Z" || st.State == "X" {
			continue
		}
		fd, err := w.r.OpenAt(taskfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, true)
		if err == nil {
			return tid, fd, true
		}
	}
	return 0, -1, false
}

// mapFilesStat returns the stat function of the maps scanner for one
// process, stat of /proc/PID/map_files/RANGE (root only), cached by file.
// After a refusal it stops asking for the rest of the process, as the
// kernel refuses map_files without CAP_SYS_ADMIN and for non-dumpable
// processes.
func (w *worker) mapFilesStat() func([]byte, []byte, uint32, uint32, uint64) (snapshot.FileKind, bool) {
	refused := false
	w.mnt, w.mntRead = "", false
	return func(rangeText, path []byte, major, minor uint32, inode uint64) (snapshot.FileKind, bool) {
		if k, ok := w.knownKind(path, major, minor, inode); ok {
			return k, true
		}
		if refused {
			return snapshot.FileKind{}, false
		}
		k, err := w.r.StatAt(w.dirfd, w.dir, "map_files/"+string(rangeText))
		if err != nil {
			refused = procfs.RefusedErr(err)
			return snapshot.FileKind{}, false
		}
		if mnt, ok := w.mntOf(); ok {
			w.kinds[fileID{major, minor, inode}] = knownFile{path: string(path), mnt: mnt, kind: k}
		}
		return k, true
	}
}

// knownKind is what stat of map_files said of a file this worker has
// stat'ed before (mapFilesStat's cache), where the same path was mapped
// in the same mount namespace.
func (w *worker) knownKind(path []byte, major, minor uint32, inode uint64) (snapshot.FileKind, bool) {
	e, ok := w.kinds[fileID{major, minor, inode}]
	if !ok || e.path != string(path) {
		return snapshot.FileKind{}, false
	}
	if mnt, ok := w.mntOf(); !ok || e.mnt != mnt {
		return snapshot.FileKind{}, false
	}
	return e.kind, true
}

// mntOf is the mount namespace of the process being read, read once, and
// whether it could be read, since a path names one file only within one.
func (w *worker) mntOf() (string, bool) {
	if !w.mntRead {
		w.mntRead = true
		w.mnt, _ = w.r.ReadlinkAt(w.dirfd, w.dir, "ns/mnt")
	}
	return w.mnt, w.mnt != ""
}

// isProcfs reports whether root is a mounted procfs.
func isProcfs(root string) bool {
	const procSuperMagic = 0x9fa0
	var fs syscall.Statfs_t
	return syscall.Statfs(root, &fs) == nil && fs.Type == procSuperMagic
}

// gone reports whether the process being read has exited, that is whether
// its directory, open since before its first read, has lost its files (a
// new process with the same PID would have a new directory).
func (w *worker) gone() bool {
	var st unix.Stat_t
	err := unix.Fstatat(w.dirfd, "stat", &st, unix.AT_SYMLINK_NOFOLLOW)
	return procfs.VanishedErr(err)
}

// userCache maps uids to user names, looked up once per capture. A nil
// cache names no uid.
type userCache struct {
	mu    sync.Mutex
	names map[int]string
}

func (c *userCache) name(uid int) string {
	if c == nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.names[uid]; ok {
		return n
	}
	n := ""
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		n = u.Username
	}
	c.names[uid] = n
	return n
}

// errText is the errno text of err without the path os would add.
func errText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

// openScan opens the proc root and reads what reading its processes needs,
// the host (h), the device classes, and whether it is the live procfs of
// this pid namespace. errs say what could not be read, and the caller closes
// cfg.rootfd. Only the live procfs has this host's links and users, so a
// copied tree gets the path rule alone.
func openScan(root string, faults func(string) error, h *snapshot.Host) (cfg *scanConfig, r *procfs.Reader, errs []string, err error) {
	live := isProcfs(root)
	rootfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("proc root: %s: %s", root, errText(err))
	}
	r = procfs.NewReader(faults, false, !live)
	errs = readHost(r, rootfd, root, h)
	h.GPUNodes = gpuNodes(r, rootfd, root, live)
	classes := snapshot.DeviceClasses{}
	if data, err := r.ReadFileAt(rootfd, root, "devices", nil); err == nil {
		classes = procfs.ParseDevices(data)
		h.NVIDIADriver = snapshot.DriverNotLoaded
		if classes.Registered {
			h.NVIDIADriver = snapshot.DriverLoaded
		}
	} else {
		errs = append(errs, "devices: "+root+"/devices: "+errText(err)+" (only major 195 counts as NVIDIA)")
	}
	cfg = &scanConfig{root: root, rootfd: rootfd, classes: classes, boot: h.BootTime, live: live, faults: faults}
	if live {
		var st unix.Stat_t
		if err := unix.Fstat(rootfd, &st); err == nil {
			cfg.rootDev = st.Dev
		}
		cfg.users = &userCache{names: map[int]string{}}
		if cfg.ownPIDs = ownPIDNamespace(rootfd); !cfg.ownPIDs {
			errs = append(errs, "proc root: "+root+" is the procfs of another pid namespace: threads' own fd tables were not looked for (kcmp takes this namespace's PIDs)")
		} else if ns, err := r.ReadlinkAt(rootfd, root, "self/ns/pid"); err == nil {
			cfg.rootNS = ns
		}
	}
	return cfg, r, errs, nil
}

// ownPIDNamespace reports whether the procfs open as rootfd is that of this
// process's pid namespace, where its "self" names this process's PID.
func ownPIDNamespace(rootfd int) bool {
	buf := make([]byte, 16)
	n, err := unix.Readlinkat(rootfd, "self", buf)
	return err == nil && string(buf[:n]) == strconv.Itoa(os.Getpid())
}
