package capture

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/gpusnap/gpusnap/bpf"
	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/snapshot"
)

// The BPF capture path (docs/snapshot.md) has BPF iterators walk every task,
// device mapping and open device file in the kernel and write fixed records
// (bpf/c/iter.c), so a process without a device is never rendered as text.
// /proc still gives command lines, cgroups and NVIDIA users' raw files. A
// process not walked fully, or holding an io_uring, is read from /proc.

// Capture paths, as Scan.Path records them.
const (
	PathBPF  = "bpf"
	PathProc = "proc"
)

// Path choices of Options.Path.
const (
	PathAuto = "" // BPF where it can run, else /proc
)

// initPIDNamespace is the inode of the host's pid namespace
// (PROC_PID_INIT_INO). The iterators see the caller's pid namespace only,
// so the BPF path runs only in this one.
const initPIDNamespace = "pid:[4026531836]"

// bpfUnavailable says why the BPF path cannot capture root, or "".
func bpfUnavailable(root string) string {
	if root != "/proc" {
		return "a --proc-root other than /proc"
	}
	if !isProcfs(root) {
		return "/proc is not a procfs"
	}
	if ns, err := os.Readlink("/proc/self/ns/pid"); err != nil || ns != initPIDNamespace {
		return "not in the host's pid namespace (the iterators see only the caller's)"
	}
	return ""
}

// nsecPerTick converts the kernel's start_boottime to stat's clock ticks.
const nsecPerTick = uint64(time.Second / snapshot.UserHZ)

// openWalk opens the iterators.
var openWalk = bpf.OpenWalk

// fillInRead is called where a fill-in that did not prove directories has
// read them all, before its mount watch is asked (a test's hook).
var fillInRead = func() {}

// scanBPF builds the processes from one walk of the iterators.
//
// pids is the listing of /proc taken before the walk. The task iterators of
// this kernel (6.18) never visit PID 1, so every listed PID the walk lacks
// is read the /proc path's way, as is any process the walk could not
// finish.
//
// With a mount watch the fill-in reads each process's files in /proc without
// proving its directory (watchMounts), and the scan fails with
// errMountsMoved where the watch saw a mount move meanwhile.
func (cfg *scanConfig) scanBPF(ctx context.Context, walk *bpf.Walk, pids []int, watch *mountWatch) ([]result, error) {
	s := newBPFScan(cfg, len(pids))
	s.unproven = watch != nil
	if err := walk.EachTask(s.task); err != nil {
		return nil, err
	}
	if _, ok := s.index[uint32(os.Getpid())]; !ok {
		return nil, errors.New("the task iterator did not see this process: not the host's pid namespace")
	}
	if err := walk.EachVMA(s.vma); err != nil {
		return nil, err
	}
	s.vmaWalker = maps.Clone(s.walkedBy)
	clear(s.walkedBy)
	if err := walk.EachFile(s.file); err != nil {
		return nil, err
	}
	w := newWorker(cfg)
	for i := range s.results {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s.fillIn(w, i)
	}
	if watch != nil {
		fillInRead()
		if watch.moved() {
			return nil, errMountsMoved
		}
	}
	for _, pid := range pids {
		if _, ok := s.index[uint32(pid)]; !ok {
			s.results = append(s.results, w.process(pid))
		}
	}
	for i := range s.results {
		if s.unwalked[uint32(s.results[i].p.PID)] {
			s.results[i] = w.process(s.results[i].p.PID)
		}
	}
	slices.SortFunc(s.results, func(a, b result) int { return a.p.PID - b.p.PID })
	return s.results, nil
}

// bpfScan is the state of one scanBPF, the processes of the task walk and
// what the mapping and file walks add to them, by thread-group id. Its
// methods are its phases, in order task, vma, file (one call a record),
// then fillIn (one call a process, for what /proc still gives).
type bpfScan struct {
	cfg         *scanConfig
	unproven    bool // the fill-in reads in /proc without proving directories (watchMounts)
	results     []result
	index       map[uint32]int // pid -> results
	kthreadComm map[int]bool
	cgroupKeys  []uint64 // by results index
	cmdlines    []kernelCmdline
	// A process's mappings and fds come from one task, its leader or, where
	// the leader has exited, the first of its live threads the kernel
	// walked. walkedBy is the current walk's, and vmaWalker the mapping
	// walk's.
	walkedBy, vmaWalker map[uint32]uint32
	unwalked            map[uint32]bool // read the /proc path's way instead

	// The mapping walk's.
	anon map[uint32]*procfs.SuspectAnon
	runs map[uint32]*procfs.MappingRuns // the maps scanner's rule of 256 lines per device, the rest counted
	id   []byte
	// A process's records come in a row, so its Process and runs are looked
	// up once per row, not per mapping (a tenant may have 100,000).
	last struct {
		pid, tid uint32
		p        *snapshot.Process
		rs       *procfs.MappingRuns
	}

	// For the file walk, threads' own fd tables by process, each table's key
	// and the first thread walked with it, which the /proc path names it by.
	// Where the leader has exited every live thread is walked, the reading
	// thread's table being the process's (baseTable) and any other thread's its
	// own.
	ownTables    map[uint32]map[uint64]uint32
	holderRunsOf map[uint32]*holderRuns // the /proc path's rule of what fds may cost
	baseTable    map[uint32]uint64
	// The records of a process's table come in a row, so the process of the
	// last one taken from the process's table is looked up once a row.
	lastTable struct {
		pid, tid uint32
		key      uint64
		p        *snapshot.Process
	}
	// Most fds a host holds on devices are of a few nodes (/dev/null, a
	// tty), one after another, so the last one's rendering is reused.
	lastFile struct {
		valid      bool
		path       []byte
		mode, rdev uint32
		h          snapshot.Holder
	}

	// The fill-in's cgroup text, read and parsed once per css_set.
	cgroups map[uint64]*cgroupSet
}

// procDir is where fillIn reads a process's files, rel+NAME in the
// directory open as fd, whose path is dir.
type procDir struct {
	fd       int
	dir, rel string
}

// kernelCmdline is what the task walk gave of a process's command line
// (have says the kernel copied it whole) and whether its exe is still to
// be read (procExe says the kernel's program could not take it).
type kernelCmdline struct {
	have, procExe bool
	text          string
}

// cgroupSet is the /proc/PID/cgroup of one css_set, parsed.
type cgroupSet struct {
	text   string
	lines  []string
	a      procfs.Attribution
	owners []snapshot.OwnerCgroup // read on the live procfs only
}

// newBPFScan is the state of a scan sized by a listing of n PIDs. A Process
// is large, and growing thousands of them by copying cost more than
// building them.
func newBPFScan(cfg *scanConfig, n int) *bpfScan {
	size := n + n/8
	return &bpfScan{
		cfg:          cfg,
		results:      make([]result, 0, size),
		index:        make(map[uint32]int, size),
		kthreadComm:  map[int]bool{},
		cmdlines:     make([]kernelCmdline, 0, size),
		walkedBy:     map[uint32]uint32{},
		unwalked:     map[uint32]bool{},
		anon:         map[uint32]*procfs.SuspectAnon{},
		runs:         map[uint32]*procfs.MappingRuns{},
		ownTables:    map[uint32]map[uint64]uint32{},
		holderRunsOf: map[uint32]*holderRuns{},
		baseTable:    map[uint32]uint64{},
		cgroups:      map[uint64]*cgroupSet{},
	}
}

// task adds the process of a task record.
func (s *bpfScan) task(r *bpf.TaskRecord, exe, cmd []byte) {
	cfg := s.cfg
	s.cmdlines = append(s.cmdlines, kernelCmdline{r.RecFlags&bpf.RecordCmdline != 0, r.RecFlags&bpf.RecordExeProc != 0, string(cmd)})
	p := snapshot.Process{
		PID:       int(r.Pid),
		StartTime: r.StartNs / nsecPerTick,
		PPID:      int(r.Ppid),
		Comm:      safetext.FromC(r.Comm[:]),
		State:     taskState(r.State, r.ExitState),
		Threads:   int(r.Threads),
	}
	if !cfg.boot.IsZero() {
		p.Started = snapshot.StartedAt(cfg.boot, p.StartTime)
	}
	s.index[r.Pid] = len(s.results)
	s.cgroupKeys = append(s.cgroupKeys, r.CgroupKey)
	if uint64(r.Flags)&procfs.PFKthread != 0 {
		// As on the /proc path, nothing more is read for a kernel thread.
		p.KernelThread = true
		p.User = cfg.users.name(0)
		s.kthreadComm[p.PID] = true
		s.results = append(s.results, result{p: p})
		return
	}
	p.UID, p.EUID = int(r.Uid), int(r.Euid)
	p.User = cfg.users.name(p.UID)
	for i := uint32(0); i <= r.NsLevel && i < uint32(len(r.Nspid)); i++ {
		p.NSpid = append(p.NSpid, int(r.Nspid[i]))
	}
	if r.RecFlags&bpf.RecordNSpidDeep != 0 {
		p.Errors = append(p.Errors, "status: NSpid deeper than "+strconv.Itoa(len(r.Nspid))+" pid namespaces: the BPF path keeps the outer "+strconv.Itoa(len(r.Nspid)))
	}
	p.PIDNamespace = "pid:[" + strconv.FormatUint(uint64(r.PidnsInum), 10) + "]"
	switch {
	case r.RecFlags&bpf.RecordPathError != 0:
		p.Errors = append(p.Errors, "exe: "+syscall.ENAMETOOLONG.Error())
	case len(exe) > 0:
		p.Exe, p.ExeDeleted = procfs.CutDeletedString(string(exe))
	}
	s.results = append(s.results, result{p: p})
}

// from is the process whose records task tid writes for process pid, or
// false where they are not to be kept, for a process started after the
// task walk (the next capture sees it), or a thread other than the one its
// records come from.
func (s *bpfScan) from(pid, tid uint32) (*snapshot.Process, bool) {
	i, ok := s.index[pid]
	if !ok {
		return nil, false
	}
	if t, seen := s.walkedBy[pid]; seen && t != tid {
		return nil, false
	}
	s.walkedBy[pid] = tid
	return &s.results[i].p, true
}

// vma adds the mapping of a mapping record to its process.
func (s *bpfScan) vma(r *bpf.VMARecord, path []byte) {
	if r.Kind == bpf.VMAUnwalked {
		s.unwalked[r.Pid] = true
		return
	}
	last := &s.last
	if last.p == nil || r.Pid != last.pid || r.Tid != last.tid {
		last.pid, last.tid = r.Pid, r.Tid
		last.p, _ = s.from(r.Pid, r.Tid)
		last.rs = nil
	}
	p := last.p
	if p == nil {
		return
	}
	perms := vmPerms(r.VmFlags)
	if r.Kind == bpf.VMAAnonExec {
		s.anonExec(r, path, perms)
		return
	}
	if last.rs == nil {
		if last.rs = s.runs[r.Pid]; last.rs == nil {
			last.rs = &procfs.MappingRuns{}
			s.runs[r.Pid] = last.rs
		}
	}
	// A line past its device's first 256 is counted before anything
	// of it is rendered.
	s.id = strconv.AppendUint(append(strconv.AppendUint(s.id[:0], uint64(r.S_dev), 16), ' '), r.Ino, 10)
	if last.rs.Counted(s.id, path, perms[:], nil, r.End-r.Start) {
		return
	}
	m := bpfMapping(r, perms)
	m.Path, m.Deleted = procfs.CutDeletedString(string(path))
	if r.Kind == bpf.VMADMABuf {
		m.Class = snapshot.ClassOther
	} else {
		if r.RecFlags&bpf.RecordPathError != 0 {
			p.Errors = append(p.Errors, "maps: "+m.Address+": "+syscall.ENAMETOOLONG.Error())
		}
		kind := kernelDevice(r.Mode, r.Rdev)
		m.DeviceNumber, m.DeviceType = kind.DeviceNumber()
		m.Class, m.GPUMinor = s.cfg.classes.Classify(m.Path, kind, true)
	}
	last.rs.Keep(s.id, path, perms[:], m.Class, m.GPUMinor)
	p.Mappings = append(p.Mappings, m)
}

// anonExec keeps or counts an anonymous executable mapping of its process.
func (s *bpfScan) anonExec(r *bpf.VMARecord, path []byte, perms [4]byte) {
	a := s.anon[r.Pid]
	if a == nil {
		a = &procfs.SuspectAnon{}
		s.anon[r.Pid] = a
	}
	if a.Full() {
		a.Count(r.End-r.Start, perms[:])
		return
	}
	m := bpfMapping(r, perms)
	if len(path) > 0 {
		m.Path = "[anon:" + string(path) + "]"
	}
	m.Class = snapshot.ClassAnonExec
	a.Keep(m)
}

// file adds the holder of a file record to its process.
func (s *bpfScan) file(r *bpf.FileRecord, path []byte) {
	if r.RecFlags&(bpf.RecordNoScratch|bpf.RecordRing) != 0 {
		// Its fds, or some, were not rendered, or it holds an io_uring,
		// whose registered files only the ring's fdinfo lists.
		s.unwalked[r.Pid] = true
		return
	}
	var p *snapshot.Process
	tid := 0
	own := r.RecFlags&bpf.RecordOwnTable != 0
	if last := &s.lastTable; !own && last.p != nil && r.Pid == last.pid && r.Tid == last.tid && r.FilesKey == last.key {
		p = last.p
	} else if !own {
		if q, ok := s.from(r.Pid, r.Tid); ok {
			p = q
			s.baseTable[r.Pid] = r.FilesKey
			last.pid, last.tid, last.key, last.p = r.Pid, r.Tid, r.FilesKey, q
		} else if key, ok := s.baseTable[r.Pid]; !ok || key == r.FilesKey {
			return // another thread sharing the process's table
		} else {
			own = true
		}
	}
	if own {
		if p = s.ownTable(r); p == nil {
			return
		}
		tid = int(s.ownTables[r.Pid][r.FilesKey])
	}
	unnamed := r.RecFlags&bpf.RecordPathError != 0
	if unnamed {
		path = nil
	} else if len(path) == 0 || path[0] != '/' {
		return // as the /proc path, which keeps fds whose link names a path
	}
	h := s.holder(r, path)
	h.FD, h.TID = int(r.Fd), tid
	hr := s.holderRunsOf[r.Pid]
	if hr == nil {
		hr = &holderRuns{}
		s.holderRunsOf[r.Pid] = hr
	}
	if !hr.kept(&h) {
		return
	}
	if unnamed {
		p.Errors = append(p.Errors, threadError(tid, unnamedDeviceFd(h.FD, syscall.ENAMETOOLONG)))
	}
	if len(p.Holders) == cap(p.Holders) {
		// Doubled, not append's quarter, as a process may hold 20,000.
		p.Holders = slices.Grow(p.Holders, max(len(p.Holders), 4))
	}
	p.Holders = append(p.Holders, h)
}

// holder is the Holder of a file record of path, without its fd and
// thread, the last record's rendering where it is of the same node.
func (s *bpfScan) holder(r *bpf.FileRecord, path []byte) snapshot.Holder {
	last := &s.lastFile
	if !last.valid || r.Mode != last.mode || r.Rdev != last.rdev || !bytes.Equal(path, last.path) {
		h := snapshot.Holder{}
		if path != nil {
			h.Target, h.Deleted = procfs.CutDeletedString(string(path))
		}
		kind := kernelDevice(r.Mode, r.Rdev)
		h.DeviceNumber, h.DeviceType = kind.DeviceNumber()
		h.Class, h.GPUMinor = s.cfg.classes.Classify(h.Target, kind, true)
		last.path, last.mode, last.rdev, last.h = append(last.path[:0], path...), r.Mode, r.Rdev, h
		last.valid = true
	}
	h := last.h
	if h.GPUMinor != nil {
		minor := *h.GPUMinor
		h.GPUMinor = &minor
	}
	if h.Class == snapshot.ClassNVIDIA {
		// fdinfo's flags field is "0%o" of f_flags, O_CLOEXEC included.
		h.Flags = "0" + strconv.FormatUint(uint64(r.Flags), 8)
		h.Access, _ = procfs.AccessMode(uint64(r.Flags))
	}
	return h
}

// ownTable is the process of a record of a thread's own fd table, or nil
// where that record is not to be kept, another thread's of a table already
// taken (threads may share a table of their own), or a table past the
// process's maxFdTables (the process is then marked unreadable, as the
// /proc path marks it).
func (s *bpfScan) ownTable(r *bpf.FileRecord) *snapshot.Process {
	i, ok := s.index[r.Pid]
	if !ok {
		return nil
	}
	p := &s.results[i].p
	t := s.ownTables[r.Pid]
	if t == nil {
		t = map[uint64]uint32{}
		s.ownTables[r.Pid] = t
	}
	if tid, seen := t[r.FilesKey]; seen {
		if tid != r.Tid {
			return nil
		}
		return p
	}
	if len(t) == maxFdTables {
		if !slices.Contains(p.Unreadable, "fd") {
			p.Unreadable = append(p.Unreadable, "fd")
			p.Errors = append(p.Errors, "fd: "+errTooManyFdTables.Error())
		}
		return nil
	}
	t[r.FilesKey] = r.Tid
	return p
}

// fillIn completes process i of the walk with what /proc still gives, that
// is its command line, cgroup text and raw text, read with the /proc path's
// worker and buffers. A process to be read the /proc way is left as it is.
func (s *bpfScan) fillIn(w *worker, i int) {
	cfg := s.cfg
	res := &s.results[i]
	p := &res.p
	pid := uint32(p.PID)
	if s.unwalked[pid] {
		return
	}
	p.Mappings = nvidiaFirst(p.Mappings, func(m snapshot.Mapping) bool { return m.Class == snapshot.ClassNVIDIA })
	if rs := s.runs[pid]; rs != nil {
		p.MappingRuns = rs.Result()
	}
	p.Holders = nvidiaFirst(p.Holders, func(h snapshot.Holder) bool { return h.Class == snapshot.ClassNVIDIA })
	if hr := s.holderRunsOf[pid]; hr != nil {
		p.HolderRuns = hr.runs.Result()
	}
	w.dir = procfs.PIDDir(cfg.root, p.PID)
	name := strconv.Itoa(p.PID)
	if s.kthreadComm[p.PID] {
		// /proc names a kernel thread by its full name or workqueue
		// ("kworker/0:1-events"), more than the 16 bytes of comm.
		if data, err := w.r.ReadTaskFileAt(cfg.rootfd, cfg.root, name+"/stat", w.small); err == nil {
			w.small = data
			if st, err := procfs.ParseStat(data); err == nil {
				p.Comm = st.Comm
			}
		}
		return
	}
	// What /proc shows of the process must be its own, so a directory a
	// mount hides (a tenant's tree in its place) is read no further. Its
	// files are read in the directory opened to prove it (in /proc where
	// it could not be opened, which then says why), or in /proc where the
	// scan's mount watch vouches for every directory.
	d := procDir{fd: cfg.rootfd, dir: cfg.root, rel: name + "/"}
	if !s.unproven {
		fd, hidden := cfg.ownDir(w.r, name)
		if fd >= 0 {
			defer w.r.Close(fd, true)
			d = procDir{fd: fd, dir: cfg.root + "/" + name}
		}
		if res.hidden = hidden; hidden != "" {
			return
		}
	}
	// A leader that has exited while its threads run has no mm. Its
	// mappings and fds came from a live thread, and so do its command line
	// and exe, read in that thread's task directory. Where it maps and holds
	// no device, no thread was seen, and /proc/PID's are read.
	taskRel := d.rel
	tid := s.vmaWalker[pid]
	if tid == 0 {
		tid = s.walkedBy[pid] // its fds' walker, where it maps no device
	}
	threadDir := p.State == "Z" && p.Threads > 1 && tid != 0 && tid != pid
	if threadDir {
		taskRel += "task/" + strconv.FormatUint(uint64(tid), 10) + "/"
	}
	kc := s.cmdlines[i]
	if p.Exe == "" && (threadDir || kc.procExe) {
		exe, err := w.r.ReadlinkAt(d.fd, d.dir, taskRel+"exe")
		switch {
		case err == nil:
			p.Exe, p.ExeDeleted = procfs.CutDeletedString(exe)
		case kc.procExe && !errors.Is(err, syscall.ENOENT): // ENOENT is a zombie's, with no exe to have
			p.Errors = append(p.Errors, "exe: "+errText(err))
		}
	}
	cmdline := kc.text
	var cut *snapshot.Cut
	if !kc.have {
		data, c, err := w.r.ReadCappedAt(d.fd, d.dir, taskRel+"cmdline", w.cmdBuf, snapshot.CmdlineLimit, true)
		w.cmdBuf, cmdline, cut = data, string(data), c
		if err != nil {
			if procfs.VanishedErr(err) {
				res.vanished = true
				return
			}
			if procfs.RefusedErr(err) {
				res.refused = true
			}
			p.Errors = append(p.Errors, "cmdline: "+errText(err))
		}
	}
	p.Cmdline, p.CmdlineCut = procfs.ParseCmdline(cmdline), cut
	set, ok := s.cgroupSet(w, res, d, s.cgroupKeys[i])
	if !ok {
		return
	}
	setCgroups(p, set)
	if p.UsesNVIDIA() {
		s.evidence(w, p, d, taskRel, cmdline, cut, set.text)
	}
}

// cgroupSet is the cgroup set of key, read in the process's
// /proc/PID/cgroup (in d) where it is the first of the set, or false where
// the process vanished meanwhile (res says so). A read that fails otherwise is
// an error of the process, with no cgroup, and is not kept for the set.
func (s *bpfScan) cgroupSet(w *worker, res *result, d procDir, key uint64) (*cgroupSet, bool) {
	if set, ok := s.cgroups[key]; ok {
		return set, true
	}
	set := &cgroupSet{}
	data, err := w.r.ReadWholeAt(d.fd, d.dir, d.rel+"cgroup", w.small)
	w.small = data
	if err != nil {
		if procfs.VanishedErr(err) {
			res.vanished = true
			return nil, false
		}
		res.p.Errors = append(res.p.Errors, "cgroup: "+errText(err))
	} else {
		set.text = string(data)
		s.cgroups[key] = set
	}
	set.parse(s.cfg.live)
	return set, true
}

// evidence adds to an NVIDIA user its suspect anonymous mappings and the
// raw text of its files, the first TextLimit bytes of maps, the rest hashed
// as read (the mappings themselves came from the iterator), and its status.
// Maps is read in the task directory taskRel (within d) the mappings came from.
func (s *bpfScan) evidence(w *worker, p *snapshot.Process, d procDir, taskRel, cmdline string, cut *snapshot.Cut, cgroup string) {
	if a := s.anon[uint32(p.PID)]; a != nil {
		p.SuspectAnon = a.Kept
		if r := a.Counted(); r != nil {
			p.MappingRuns = append(p.MappingRuns, *r)
		}
	}
	maps, mapsCut, err := w.r.ReadCappedAt(d.fd, d.dir, taskRel+"maps", w.mapsBuf, snapshot.TextLimit, false)
	w.mapsBuf = maps
	if err != nil {
		p.Errors = append(p.Errors, "maps: "+errText(err))
	}
	status, err := w.r.ReadFileAt(d.fd, d.dir, d.rel+"status", w.statusBuf)
	w.statusBuf = status
	if err != nil {
		p.Errors = append(p.Errors, "status: "+errText(err))
	}
	p.Raw = newRaw(maps, mapsCut, status, cmdline, cut, cgroup)
}

// nvidiaFirst orders NVIDIA entries before the others, each kept in order,
// as the /proc path lists them.
func nvidiaFirst[T any](xs []T, nvidia func(T) bool) []T {
	// Already so (no NVIDIA entry after another one), with nothing to copy.
	other := slices.IndexFunc(xs, func(x T) bool { return !nvidia(x) })
	if other < 0 || !slices.ContainsFunc(xs[other:], nvidia) {
		return xs
	}
	out := make([]T, 0, len(xs))
	for _, x := range xs {
		if nvidia(x) {
			out = append(out, x)
		}
	}
	for _, x := range xs {
		if !nvidia(x) {
			out = append(out, x)
		}
	}
	return out
}

// taskState is the state letter of stat field 3 for a task's __state and
// exit_state, as the kernel computes it (__task_state_index).
func taskState(state, exitState uint32) string {
	const (
		taskReport      = 0x7f // R S D T t X Z P
		taskIdle        = 0x402
		taskReportIdle  = 0x80
		uninterruptible = 0x2
		rtlockOrFrozen  = 0x1000 | 0x8000
	)
	s := (state | exitState) & taskReport
	if state&taskIdle == taskIdle {
		s = taskReportIdle
	}
	if state&rtlockOrFrozen != 0 {
		s = uninterruptible
	}
	return string("RSDTtXZPI"[bits.Len32(s)])
}

// kernelDevice is the FileKind of an inode's mode and i_rdev (the kernel's
// dev_t, major above bit 20).
func kernelDevice(mode, rdev uint32) snapshot.FileKind {
	typ := mode & syscall.S_IFMT
	return snapshot.FileKind{
		Device: typ == syscall.S_IFCHR || typ == syscall.S_IFBLK,
		Char:   typ == syscall.S_IFCHR,
		Major:  rdev >> 20,
		Minor:  rdev & 0xfffff,
	}
}

// bpfMapping is the Mapping of a mapping record, without its path and class.
func bpfMapping(r *bpf.VMARecord, perms [4]byte) snapshot.Mapping {
	return snapshot.Mapping{
		Address: mapsRange(r.Start, r.End),
		Start:   r.Start, End: r.End, Size: r.End - r.Start,
		Perms:  string(perms[:]),
		Offset: r.Pgoff << pageShift,
		Dev:    fmt.Sprintf("%02x:%02x", r.S_dev>>20, r.S_dev&0xfffff),
		Inode:  r.Ino,
	}
}

// vmPerms renders VM_READ, VM_WRITE, VM_EXEC and VM_MAYSHARE as maps does.
func vmPerms(flags uint32) [4]byte {
	b := [4]byte{'-', '-', '-', 'p'}
	if flags&0x1 != 0 {
		b[0] = 'r'
	}
	if flags&0x2 != 0 {
		b[1] = 'w'
	}
	if flags&0x4 != 0 {
		b[2] = 'x'
	}
	if flags&0x80 != 0 {
		b[3] = 's'
	}
	return b
}

// mapsRange renders an address range as maps does, "%08lx-%08lx".
func mapsRange(start, end uint64) string {
	return fmt.Sprintf("%08x-%08x", start, end)
}

// pageShift is log2 of the page size, as vm_pgoff counts pages.
var pageShift = bits.TrailingZeros(uint(os.Getpagesize()))
