package bpf

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// Hook is how the watch programs see opens and mappings of devices.
type Hook string

// The hooks, best first. The security hooks see every open and mapping
// (io_uring's and the kernel's on a process's behalf included), and only
// opens and mappings pay for them. The syscall tracepoints see only the
// syscalls they are attached to, and send every system call of the host down
// the slow path.
const (
	HookLSM        Hook = "lsm"        // BPF LSM programs on file_open and mmap_file
	HookFentry     Hook = "fentry"     // fentry on security_file_open and security_mmap_file
	HookKprobe     Hook = "kprobe"     // kprobes on security_file_open and security_mmap_file
	HookTracepoint Hook = "tracepoint" // syscall tracepoints, the open family on exit and mmap on entry, with io_uring's opens and 32-bit calls
)

// Hooks lists every hook, best first.
var Hooks = []Hook{HookLSM, HookFentry, HookKprobe, HookTracepoint}

// Kind is what a kernel event reports.
type Kind uint32

// The kinds of event (enum event_kind in c/watch.c).
const (
	KindOpen = Kind(watchEventKindEV_OPEN)
	KindMmap = Kind(watchEventKindEV_MMAP)
	KindExec = Kind(watchEventKindEV_EXEC)
	KindExit = Kind(watchEventKindEV_EXIT)
	KindFork = Kind(watchEventKindEV_FORK)
)

// Event is one kernel event, decoded. Times are CLOCK_BOOTTIME nanoseconds.
type Event struct {
	Kind         Kind
	TimeNS       uint64 // when the hook ran
	StartNS      uint64 // the process's start, /proc/PID/stat field 22 in ns
	CgroupID     uint64 // cgroup v2 id, the inode number of its directory
	PID          uint32 // the process (thread group id)
	TID          uint32
	NSPID        uint32 // the PID in the process's own pid namespace
	PPID         uint32
	UID          uint32
	Comm         string
	Major, Minor uint32 // the device's own number (open, mmap)
	Mode         uint32 // the device's i_mode, its file type (open, mmap)
	Flags        uint32 // f_flags of an open, the flags an mmap asked for, or an exit's code
	Prot         uint32 // f_mode of an open, or the protection an mmap asked for
	FD           int32  // -1 where the hook has no descriptor
	Length       uint64 // the length an mmap asked for (0 where the hook has none)
	Path         string // the device's path (open, mmap). A path cut short starts with ".../"
	Exe          string // the process's executable, walked in the kernel on its first open or mapping of a device and at exec (the new one)
	ExecNS       uint64 // on a process's first open or mmap of a device, when it last exec'd (0 if not since it started)
	ChildPID     uint32 // fork
	ChildStartNS uint64 // fork
	// Run numbers the process's run of like opens or mappings this event
	// starts (a whole event) or counts (a run's record), 0 for none, as
	// struct run in c/watch.c keeps them. A run's record carries neither
	// path nor exe, since its run's first event named them.
	Run     uint32
	Count   uint64 // how many like events a run's record stands for (0 means one, this one)
	FirstNS uint64 // on a run's record, the time of the first of its events (TimeNS is the last)
}

// Runs is how many runs of like events the kernel counts for one process,
// and RunsProcs for how many processes at a time (struct run in c/watch.c).
const (
	Runs      = uint32(watchRunLimitRUNS)
	RunsProcs = int(watchRunLimitRUNS_PROCS)
)

// Char reports whether the device is a character device.
func (e *Event) Char() bool { return e.Mode&syscall.S_IFMT == syscall.S_IFCHR }

// Watch is the loaded and attached watch programs.
type Watch struct {
	Hook Hook
	// Refused says, for each better hook, why it did not load.
	Refused []string
	// Unattached names tracepoints this kernel lacks (sys_exit_open on arm64,
	// io_uring_complete without io_uring).
	Unattached []string

	maps   sharedMaps
	coll   *ebpf.Collection // the programs of the hook that loaded
	lost   *ebpf.Variable
	links  []link.Link
	reader *ringbuf.Reader
}

// hookPrograms are the programs of each hook.
var hookPrograms = map[Hook][]string{
	HookLSM:    {"lsm_file_open", "lsm_mmap_file"},
	HookFentry: {"fentry_file_open", "fentry_mmap_file"},
	HookKprobe: {"kprobe_file_open", "kprobe_mmap_file"},
	HookTracepoint: {"tp_exit_openat", "tp_exit_openat2", "tp_exit_open", "tp_exit_creat",
		"tp_exit_open_by_handle_at", "tp_enter_mmap", "tp_io_uring_complete", "tp_ia32_exit"},
}

// lifePrograms report exec, fork and exit in every mode.
var lifePrograms = []string{"on_exec", "on_fork", "on_exit"}

// TracefsDir is where the syscall tracepoints are found.
const TracefsDir = "/sys/kernel/tracing"

// Open loads the watch programs with the best hook the kernel accepts among
// hooks (Hooks when nil), fills the NVIDIA majors, and attaches them. The
// error names the kernel feature that is missing.
func Open(majors []uint32, hooks []Hook) (*Watch, error) {
	if len(hooks) == 0 {
		hooks = Hooks
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return nil, fmt.Errorf("kernel BTF is missing (/sys/kernel/btf/vmlinux: %v): BPF needs CONFIG_DEBUG_INFO_BTF", err)
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK, later ones to
	// the cgroup, and raising it may be refused. It is raised here, not
	// through cilium/ebpf's rlimit package, whose init probes the kernel in
	// every command (docs/performance.md, Start-up).
	_ = unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY})
	spec, err := loadWatch()
	if err != nil {
		return nil, fmt.Errorf("the watch programs: %w", err)
	}
	w := &Watch{}
	if err := spec.LoadAndAssign(&w.maps, nil); err != nil {
		return nil, loadError("the watch maps", err)
	}
	ok := false
	defer func() {
		if !ok {
			w.Close()
		}
	}()
	for _, major := range majors {
		if err := w.maps.NvidiaMajors.Put(major, uint8(1)); err != nil {
			return nil, fmt.Errorf("fill the NVIDIA majors: %w", err)
		}
	}
	if err := withTracefs(func(unmounted error) error { return w.attachBest(spec, hooks, unmounted) }); err != nil {
		return nil, err
	}
	for _, name := range lifePrograms {
		l, err := link.AttachTracing(link.TracingOptions{Program: w.coll.Programs[name]})
		if err != nil {
			return nil, fmt.Errorf("attach %s (BTF tracepoint): %w", name, err)
		}
		w.links = append(w.links, l)
	}
	if w.lost = w.coll.Variables["lost"]; w.lost == nil {
		return nil, errors.New("the watch object has no lost-event counter")
	}
	if w.reader, err = ringbuf.NewReader(w.maps.Events); err != nil {
		return nil, fmt.Errorf("open the ring buffer: %w", err)
	}
	ok = true
	return w, nil
}

// sharedMaps are the maps every hook's programs share.
type sharedMaps struct {
	Events       *ebpf.Map `ebpf:"events"`
	NvidiaMajors *ebpf.Map `ebpf:"nvidia_majors"`
	Seen         *ebpf.Map `ebpf:"seen"`
	Bss          *ebpf.Map `ebpf:".bss"`
	Scratch      *ebpf.Map `ebpf:"scratch"`
	Runs         *ebpf.Map `ebpf:"runs"`
}

func (m *sharedMaps) replacements() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{"events": m.Events, "nvidia_majors": m.NvidiaMajors, "seen": m.Seen, ".bss": m.Bss, "scratch": m.Scratch, "runs": m.Runs}
}

// attachBest attaches the first of hooks the kernel takes. unmounted, where
// not nil, is why tracefs could not be mounted, and stands as the tracepoint
// hook's refusal.
func (w *Watch) attachBest(spec *ebpf.CollectionSpec, hooks []Hook, unmounted error) error {
	for _, hook := range hooks {
		err := unmounted
		if hook != HookTracepoint || unmounted == nil {
			err = w.attachHook(spec, hook)
		}
		if err == nil {
			w.Hook = hook
			return nil
		}
		w.Refused = append(w.Refused, fmt.Sprintf("%s: %v", hook, err))
		w.closeLinks()
		w.closeCollection()
	}
	return fmt.Errorf("no BPF hook loads (%s)", strings.Join(w.Refused, "; "))
}

// attachHook loads one hook's programs with the life programs, in one
// collection sharing the maps already loaded, and attaches the hook's. One
// load relocates against the kernel's BTF once, not once a program.
func (w *Watch) attachHook(spec *ebpf.CollectionSpec, hook Hook) error {
	sub := spec.Copy()
	sub.Programs = map[string]*ebpf.ProgramSpec{}
	for _, name := range append(slices.Clone(hookPrograms[hook]), lifePrograms...) {
		if spec.Programs[name] == nil {
			return fmt.Errorf("the watch object has no program %s", name)
		}
		sub.Programs[name] = spec.Programs[name]
	}
	coll, err := ebpf.NewCollectionWithOptions(sub, ebpf.CollectionOptions{MapReplacements: w.maps.replacements()})
	if err != nil {
		return loadError(hookPrograms[hook][0], err)
	}
	w.coll = coll
	return w.attachLinks(spec, hook)
}

// attachLinks attaches the loaded programs of a hook.
func (w *Watch) attachLinks(spec *ebpf.CollectionSpec, hook Hook) error {
	for _, name := range hookPrograms[hook] {
		section := spec.Programs[name].SectionName
		l, err := attachSection(section, w.coll.Programs[name])
		if errors.Is(err, os.ErrNotExist) && hook == HookTracepoint && name != "tp_exit_openat" && name != "tp_enter_mmap" {
			// open and creat exist on x86_64 only, and io_uring_complete
			// where the kernel has io_uring.
			_, tp, _ := strings.Cut(strings.TrimPrefix(section, "tracepoint/"), "/")
			w.Unattached = append(w.Unattached, tp)
			continue
		}
		if err != nil {
			return fmt.Errorf("attach %s: %w", name, err)
		}
		w.links = append(w.links, l)
	}
	return nil
}

// attachSection attaches prog where its ELF section names, be it an LSM
// hook, a BTF tracing point (fentry, tp_btf), a kprobe or a tracefs
// tracepoint.
func attachSection(section string, prog *ebpf.Program) (link.Link, error) {
	kind, point, _ := strings.Cut(section, "/")
	switch kind {
	case "lsm":
		return link.AttachLSM(link.LSMOptions{Program: prog})
	case "fentry", "tp_btf":
		return link.AttachTracing(link.TracingOptions{Program: prog})
	case "kprobe":
		return link.Kprobe(point, prog, nil)
	case "tracepoint":
		group, tp, _ := strings.Cut(point, "/")
		return link.Tracepoint(group, tp, prog, nil)
	}
	return nil, fmt.Errorf("no way to attach a program of section %s", section)
}

// withTracefs runs attach where tracefs is mounted. Where the host has not
// mounted it, attach runs on a thread of its own in a private mount
// namespace with tracefs there, so the host's mounts stay as they were.
// Every hook is tried there, because cilium/ebpf caches its tracefs lookup
// and kprobes make it first. Where no such namespace can be made, unmounted
// says why.
func withTracefs(attach func(unmounted error) error) error {
	if _, err := os.Stat(TracefsDir + "/events"); err == nil {
		return attach(nil)
	}
	errc := make(chan error, 1)
	go func() {
		// The thread is never unlocked. In its own mount namespace, it ends
		// with this goroutine and runs nothing else.
		runtime.LockOSThread()
		errc <- attach(mountTracefsPrivately())
	}()
	return <-errc
}

// mountTracefsPrivately moves the calling thread into a mount namespace of
// its own and mounts tracefs there. The error says which step failed.
func mountTracefsPrivately() error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("tracefs is not mounted at %s, and a mount namespace to mount it in was refused: %w", TracefsDir, err)
	}
	// Private first, since a mount under a shared / would reach the host's
	// namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("tracefs: making a private mount namespace: %w", err)
	}
	if err := unix.Mount("nodev", TracefsDir, "tracefs", 0, ""); err != nil {
		return fmt.Errorf("tracefs is not mounted at %s and mounting it failed: %w", TracefsDir, err)
	}
	return nil
}

// loadError names what the kernel refused, in one line, and wraps the
// kernel's answer still, for Refused to judge.
func loadError(what string, err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		// The verifier's log is long, and its last line says why.
		return &refusalError{fmt.Sprintf("%s: the verifier refused it: %s", what, lastLine(ve.Log)), err}
	}
	if errors.Is(err, os.ErrPermission) {
		return &refusalError{what + ": the kernel refused to load it (operation not permitted: not root, or a policy forbids this program type)", err}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// lastLine is the verifier's last word, its last line but the statistics
// some kernels end the log with.
func lastLine(log []string) string {
	for i := len(log) - 1; i >= 0; i-- {
		if s := strings.TrimSpace(log[i]); s != "" && !strings.HasPrefix(s, "processed ") && !strings.HasPrefix(s, "verification time") {
			return s
		}
	}
	return "no log"
}

// Read blocks until the next event. After Stop it returns the events still
// in the ring buffer, then ErrStopped. After Close it returns ErrClosed.
func (w *Watch) Read() (Event, error) {
	rec, err := w.reader.Read()
	switch {
	case errors.Is(err, ringbuf.ErrFlushed):
		return Event{}, ErrStopped
	case errors.Is(err, ringbuf.ErrClosed):
		return Event{}, ErrClosed
	case err != nil:
		return Event{}, err
	}
	return decode(rec.RawSample)
}

// Errors of Read.
var (
	ErrStopped = errors.New("watch stopped")
	ErrClosed  = errors.New("watch closed")
)

// Stop detaches the programs, so no event comes after the ones in the ring
// buffer now, and wakes Read to return those.
func (w *Watch) Stop() error {
	w.closeLinks()
	return w.reader.Flush()
}

// Counted returns, after Stop, a record of each run whose count the kernel
// holds still (its like events since the run's last record), for user space
// to write, since with the programs detached nothing counts into them any
// more. Each is as the kernel would have sent it.
func (w *Watch) Counted() ([]Event, error) {
	var (
		tgid uint32
		rs   watchProcRuns
		out  []Event
	)
	it := w.maps.Runs.Iterate()
	for it.Next(&tgid, &rs) {
		for i, r := range rs.R {
			if r.State != uint32(watchRunStateRUN_COUNTING) || r.Count == 0 {
				continue
			}
			out = append(out, Event{Kind: Kind(r.Like >> 16), PID: tgid, TID: tgid, StartNS: rs.StartNs, FD: -1,
				TimeNS: r.LastNs, FirstNS: r.FirstNs, Count: r.Count, Run: uint32(i) + 1})
		}
	}
	return out, it.Err()
}

// Lost is how many events the ring buffer had no room for since Open.
func (w *Watch) Lost() (uint64, error) {
	var n uint64
	err := w.lost.Get(&n)
	return n, err
}

// Close detaches the programs and frees the maps. A Read in progress returns
// ErrClosed.
func (w *Watch) Close() error {
	if w.reader != nil {
		_ = w.reader.Close()
	}
	w.closeLinks()
	w.closeCollection()
	for _, m := range []*ebpf.Map{w.maps.Events, w.maps.NvidiaMajors, w.maps.Seen, w.maps.Bss, w.maps.Scratch, w.maps.Runs} {
		if m != nil {
			_ = m.Close()
		}
	}
	return nil
}

func (w *Watch) closeCollection() {
	if w.coll != nil {
		w.coll.Close()
		w.coll = nil
	}
}

func (w *Watch) closeLinks() {
	for _, l := range w.links {
		_ = l.Close()
	}
	w.links = nil
}

// decode reads an event as watch.c laid it out.
func decode(raw []byte) (Event, error) {
	// A record without an exe ends where the exe would start, and one
	// without a path where the path would (watch.c's emit).
	var k watchEvent
	if len(raw) < int(unsafe.Offsetof(k.Path)) {
		return Event{}, fmt.Errorf("short event: %d bytes", len(raw))
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&k)), unsafe.Sizeof(k)), raw)
	e := Event{
		Kind: Kind(k.Kind), TimeNS: k.TimeNs, StartNS: k.StartNs, CgroupID: k.CgroupId,
		PID: k.Pid, TID: k.Tid, NSPID: k.NsPid, PPID: k.Ppid, UID: k.Uid,
		Comm:  cString(k.Comm[:]),
		Major: k.RdevMajor, Minor: k.RdevMinor, Mode: k.Mode, Flags: k.Flags, Prot: k.Prot,
		FD: k.Fd, Length: k.Length, ChildPID: k.ChildPid, ChildStartNS: k.ChildStartNs, ExecNS: k.ExecNs,
		Run: k.Run, Count: k.Count, FirstNS: k.FirstNs,
	}
	if k.ExeDepth > 0 {
		slots := unsafe.Slice((*byte)(unsafe.Pointer(&k.Exe[0])), len(k.Exe))
		e.Exe = joinPath(slots, int(k.ExeDepth), k.ExeComplete != 0)
	}
	if k.Depth > 0 {
		slots := unsafe.Slice((*byte)(unsafe.Pointer(&k.Path[0])), len(k.Path))
		e.Path = joinPath(slots, int(k.Depth), k.Complete != 0)
	}
	return e, nil
}

// nameLen is the size of each name's slot (enum path_limit in c/watch.c).
const nameLen = int(watchPathLimitNAME_LEN)

// joinPath joins the names watch.c kept innermost first, one a slot. A path
// the walk did not follow to the root starts with ".../".
func joinPath(slots []byte, depth int, complete bool) string {
	depth = min(depth, len(slots)/nameLen)
	names := make([]string, 0, depth)
	for i := range depth {
		name, _, _ := bytes.Cut(slots[i*nameLen:(i+1)*nameLen], []byte{0})
		names = append(names, string(name))
	}
	slices.Reverse(names)
	p := "/" + strings.Join(names, "/")
	if !complete {
		p = "..." + p
	}
	return p
}

func cString[T int8 | byte](b []T) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
