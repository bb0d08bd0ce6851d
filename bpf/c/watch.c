// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// watch.c: the kernel side of `gpusnap watch`. It reports every open and
// mapping of a device node that may be an NVIDIA device, and the exec, fork
// and exit of every process that made one, to user space through a ring
// buffer. The filter here is a superset of gpusnap's classifier (user space
// classifies each event again with it): a character device of a major in
// nvidia_majors, or any device node whose name starts with "nvidia" in a
// directory named "dev" (or one below it, /dev/nvidia-caps/nvidia-cap1).
//
// Four ways to see opens and mappings, user space loads the first the kernel
// accepts: BPF LSM (lsm/file_open, lsm/mmap_file), fentry or kprobes on the
// same security hooks, or the syscall tracepoints (exit of the open family, the
// file looked up in the task's fd table; entry of mmap), with io_uring's
// completions and the raw tracepoints for 32-bit calls. Exec, fork and exit
// use BTF tracepoints in every mode.

#include "gpusnap.h"

// What an event reports.
enum event_kind {
	EV_OPEN = 1,
	EV_MMAP = 2,
	EV_EXEC = 3,
	EV_EXIT = 4,
	EV_FORK = 5,
};

// A path is kept as its innermost PATH_DEPTH names, innermost first, each in
// a NAME_LEN slot (NUL-terminated; a longer name is cut). Fixed slots keep the
// verifier's work small: it loads in milliseconds, not seconds.
enum path_limit {
	PATH_DEPTH = 12,
	NAME_LEN = 80,
	PATH_LEN = PATH_DEPTH * NAME_LEN,
};

// event is what one hook reports; its layout is mirrored by bpf2go's Go type.
struct event {
	u64 time_ns;       // bpf_ktime_get_boot_ns: CLOCK_BOOTTIME
	u64 start_ns;      // the thread group leader's start_boottime: /proc/PID/stat field 22 in ns
	u64 cgroup_id;     // the cgroup v2 id (the inode of its directory)
	u64 length;        // mmap: the length asked for
	u64 child_start_ns;// fork: the child's start_boottime
	u64 exec_ns;       // open, mmap: when the process last exec'd, on its first use of a device (0: not seen)
	u32 kind;
	u32 pid;           // the thread group id: the process
	u32 tid;
	u32 ns_pid;        // the process's pid in its own pid namespace
	u32 ppid;
	u32 uid;
	u32 rdev_major;
	u32 rdev_minor;
	u32 mode;          // i_mode of the device: its file type
	u32 flags;         // open: f_flags; mmap: the flags asked for
	u32 prot;          // mmap: the protection asked for; open: f_mode
	s32 fd;            // -1 where the hook has no descriptor
	u32 child_pid;     // fork: the child's pid
	u32 depth;         // how many names path holds
	u32 complete;      // 1 when path reaches the root; 0 when it was cut
	u32 exe_depth;     // the same, for exe
	u32 exe_complete;
	u32 run;           // open, mmap: the run (1 to RUNS) of like events it starts or counts; 0: none
	u64 count;         // a run's record: how many like events it stands for (0: one event, the record itself)
	u64 first_ns;      // a run's record: the first of them (time_ns is the last)
	char comm[16];
	// open, mmap: the device's path.
	char path[PATH_LEN];
	// the process's executable, walked in the kernel (so a process gone before
	// user space reads the event is still named by it) on its first open or
	// mapping of a device and at its exec; left out of the record otherwise.
	char exe[PATH_LEN];
};

// Repeats: a process that opens or maps the same node the same way in a
// loop is counted here, not reported event by event. A run is one process's
// like events (the same node, by dentry and mount, kind, and access or
// protection). Its first event goes out whole, naming the run, and the
// like ones after it are counted in the run's slot: at most one record a
// REPEAT_NS carries the count (and the first time) since the last, and the
// counts left go out at the process's exec and exit, and when the watch
// stops (user space reads the slots then). A process has RUNS slots, and
// the map room for RUNS_PROCS processes: past either, events go out one by
// one as before, so a flood can fill neither for another process.
enum run_limit {
	RUNS = 8,
	RUNS_PROCS = 16384,
	REPEAT_NS = 1000000000,
};

// run_state: a slot is free, being claimed by one thread, or counting.
enum run_state {
	RUN_FREE = 0,
	RUN_CLAIMED = 1,
	RUN_COUNTING = 2,
};

struct run {
	u64 dentry;     // the node's dentry and mount: its path
	u64 mnt;
	u64 count;      // like events counted since the run's last record
	u64 first_ns;   // the first of them
	u64 last_ns;    // the last of them
	u64 emitted_ns; // when the run's last record went out
	u32 like;       // kind << 16, then the access mode (open) or protection and sharing (mmap)
	u32 state;      // enum run_state
};

// runs: a process's runs, by tgid; start_ns tells a reused PID.
struct proc_runs {
	u64 start_ns;
	struct run r[RUNS];
};

// Keep struct event, struct proc_runs and the enums in the object's BTF, for
// bpf2go's Go types.
const struct event *unused_event __attribute__((unused));
const struct proc_runs *unused_runs __attribute__((unused));
const enum event_kind *unused_event_kind __attribute__((unused));
const enum path_limit *unused_path_limit __attribute__((unused));
const enum run_limit *unused_run_limit __attribute__((unused));
const enum run_state *unused_run_state __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	// 16 MiB: with repeats counted in runs, a flood of like events is one
	// record a second; 16 MiB holds more than a second of 10,000 events a
	// second that no run counts (docs/watch.md).
	__uint(max_entries, 1 << 24);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RUNS_PROCS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, u32);
	__type(value, struct proc_runs);
} runs SEC(".maps");

// runs_zero is a process's runs before its first: the value a new entry of
// runs is made from (too large for the stack).
const struct proc_runs runs_zero = {};

// nvidia_majors: the character majors of the NVIDIA driver (195 and those
// /proc/devices names nvidia-*), filled by user space before attaching.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, u32);
	__type(value, u8);
} nvidia_majors SEC(".maps");

// seen: the processes (tgid -> start_boottime) that opened or mapped a
// device, whose fork and exit are reported.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, u32);
	__type(value, u64);
} seen SEC(".maps");

// scratch: an event is built here, then copied to the ring buffer whole.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct event);
} scratch SEC(".maps");

// execs: when each process last exec'd (tgid -> CLOCK_BOOTTIME ns). Every
// exec updates it, and nothing goes to user space: only a process that then
// uses a device has its exec reported, with that device event.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, u32);
	__type(value, u64);
} execs SEC(".maps");

// lost counts the events the ring buffer had no room for; user space reports it.
u64 lost = 0;

// emit copies the event to the ring buffer and reports whether it went.
// The slots it does not use, last in the event, are left out: the exe where
// the process was named before, and the path too where it has none (exec,
// fork, exit, a run's record). A record not written counts as the events it
// stands for among those lost.
static __always_inline int emit(struct event *e)
{
	u64 size = e->exe_depth ? sizeof(*e) : e->depth ? offsetof(struct event, exe) : offsetof(struct event, path);
	if (bpf_ringbuf_output(&events, e, size, 0) == 0)
		return 1;
	__sync_fetch_and_add(&lost, e->count ? e->count : 1);
	return 0;
}

// begin fills a scratch event with the current process's identity.
static __always_inline struct event *begin(u32 kind)
{
	u32 zero = 0;
	struct event *e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return 0;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct task_struct *leader = BPF_CORE_READ(task, group_leader);
	u64 pid_tgid = bpf_get_current_pid_tgid();

	e->kind = kind;
	e->time_ns = bpf_ktime_get_boot_ns();
	e->start_ns = BPF_CORE_READ(leader, start_boottime);
	e->cgroup_id = bpf_get_current_cgroup_id();
	e->pid = pid_tgid >> 32;
	e->tid = (u32)pid_tgid;
	e->ppid = BPF_CORE_READ(task, real_parent, tgid);
	e->uid = (u32)bpf_get_current_uid_gid();
	e->fd = -1;
	e->length = 0;
	e->child_pid = 0;
	e->child_start_ns = 0;
	e->rdev_major = e->rdev_minor = e->mode = e->flags = e->prot = e->depth = e->complete = 0;
	e->exe_depth = e->exe_complete = 0;
	e->exec_ns = 0;
	e->run = 0;
	e->count = e->first_ns = 0;

	struct pid *tp = BPF_CORE_READ(leader, thread_pid);
	u32 level = BPF_CORE_READ(tp, level);
	e->ns_pid = 0;
	if (level < 32) {
		struct upid up = {};
		bpf_core_read(&up, sizeof(up), &tp->numbers[level]);
		e->ns_pid = up.nr;
	}
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	return e;
}

static __always_inline int name_is(const char *name, const char *want, int n)
{
	for (int i = 0; i < n; i++)
		if (name[i] != want[i])
			return 0;
	return 1;
}

// walk_path walks from the file's dentry towards the root, crossing mount
// points, and keeps the names it passes (innermost first) in buf.
static __always_inline void walk_path(char *buf, u32 *depth_out, u32 *complete, struct file *file)
{
	struct dentry *d = BPF_CORE_READ(file, f_path.dentry);
	struct vfsmount *vm = BPF_CORE_READ(file, f_path.mnt);
	struct mount *mnt = (void *)vm - bpf_core_field_offset(struct mount, mnt);
	u32 depth = 0;

	*complete = 0;
	if (!file) {
		*depth_out = 0;
		return;
	}
	for (int i = 0; i < PATH_DEPTH + 4; i++) {
		struct dentry *parent = BPF_CORE_READ(d, d_parent);
		struct dentry *root = BPF_CORE_READ(mnt, mnt.mnt_root);
		if (d == root) {
			struct mount *up = BPF_CORE_READ(mnt, mnt_parent);
			if (up == mnt) {
				*complete = 1; // the root of everything
				break;
			}
			d = BPF_CORE_READ(mnt, mnt_mountpoint);
			mnt = up;
			continue;
		}
		if (d == parent)
			break; // a dentry cut off from its mount
		if (depth == PATH_DEPTH)
			break;
		const unsigned char *name = BPF_CORE_READ(d, d_name.name);
		bpf_probe_read_kernel_str(&buf[depth * NAME_LEN], NAME_LEN, name);
		depth++;
		d = parent;
	}
	*depth_out = depth;
}

static __always_inline void fill_path(struct event *e, struct file *file)
{
	walk_path(e->path, &e->depth, &e->complete, file);
}

// fill_exe walks the current process's executable.
static __always_inline void fill_exe(struct event *e)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	walk_path(e->exe, &e->exe_depth, &e->exe_complete, BPF_CORE_READ(task, mm, exe_file));
}

// nvidia_name: the last name starts with "nvidia" and its directory (or the
// one above it) is named "dev".
static __always_inline int nvidia_name(struct event *e)
{
	if (e->depth < 2 || !name_is(&e->path[0], "nvidia", 6))
		return 0;
	if (name_is(&e->path[NAME_LEN], "dev", 4))
		return 1;
	return e->depth >= 3 && name_is(&e->path[2 * NAME_LEN], "dev", 4);
}

// like_of is what makes two events of one process on one node alike, as
// user space records them: the kind, and an open's access mode or a
// mapping's protection and sharing (MAP_TYPE).
static __always_inline u32 like_of(u32 kind, u32 f_flags, u32 flags, u32 prot)
{
	if (kind == EV_OPEN)
		return kind << 16 | (f_flags & 3);
	return kind << 16 | (prot & 7) << 8 | (flags & 0xf);
}

// process_runs returns the runs of the process with tgid and start, made
// empty on its first use of a device (or where a PID's earlier process left
// its own). 0 where the map is full: its events then go out one by one.
static __always_inline struct proc_runs *process_runs(u32 tgid, u64 start)
{
	struct proc_runs *rs = bpf_map_lookup_elem(&runs, &tgid);
	if (rs && rs->start_ns == start)
		return rs;
	if (bpf_map_update_elem(&runs, &tgid, &runs_zero, BPF_ANY) < 0)
		return 0;
	rs = bpf_map_lookup_elem(&runs, &tgid);
	if (rs)
		rs->start_ns = start;
	return rs;
}

// run_count counts one like event at now in run r.
static __always_inline void run_count(struct run *r, u64 now)
{
	if (__sync_fetch_and_add(&r->count, 1) == 0)
		r->first_ns = now;
	r->last_ns = now;
}

// The run functions below are global functions: the verifier checks each
// once, not once for every path of every program that calls it, and their
// arguments are numbers (the runs are looked up again in each).

// run_record sends the count run i of the process tgid holds as one record,
// with the like event at now where there is one (now != 0). Nothing goes
// where nothing is counted. The count is taken with an exchange: a thread
// counting meanwhile counts into the next record.
__noinline int run_record(u32 tgid, u32 i, u64 now)
{
	struct proc_runs *rs = bpf_map_lookup_elem(&runs, &tgid);
	if (!rs || i >= RUNS)
		return 0;
	struct run *r = &rs->r[i];
	u64 first = r->first_ns, last = r->last_ns;
	u64 n = __sync_lock_test_and_set(&r->count, 0);
	if (now) {
		first = n ? first : now;
		last = now;
		n++;
	}
	if (!n)
		return 0;
	struct event *e = begin(r->like >> 16);
	if (!e) {
		__sync_fetch_and_add(&lost, n);
		return 0;
	}
	e->start_ns = rs->start_ns;
	e->time_ns = last;
	e->first_ns = first;
	e->count = n;
	e->run = i + 1;
	return emit(e);
}

// runs_end sends the counts the runs of tgid hold and forgets them, at the
// process's exec (the new program's uses start runs of their own) and exit.
// It reports whether a run had started: the process used a device (runs
// are made before the device's name is checked, so an entry alone does not
// say so).
static __always_inline int runs_end(u32 tgid)
{
	struct proc_runs *rs = bpf_map_lookup_elem(&runs, &tgid);
	if (!rs)
		return 0;
	int used = 0;
	for (u32 i = 0; i < RUNS; i++) {
		used |= rs->r[i].state == RUN_COUNTING;
		run_record(tgid, i, 0);
	}
	bpf_map_delete_elem(&runs, &tgid);
	return used;
}

// What run_take did with an event, where it claimed no slot.
enum run_taken {
	RUN_COUNTED = -2, // counted in its run (and sent in its record, where one was due): nothing more to send
	RUN_NONE = -1,    // no run and no free slot: sent alone
};

// run_take counts a like event of the process tgid (started at start) in
// its run, or claims a free slot for a new run: it returns the slot (its
// caller sends the event, then calls run_start), or a run_taken.
__noinline int run_take(u32 tgid, u64 start, u64 dentry, u64 mnt, u32 like)
{
	struct proc_runs *rs = process_runs(tgid, start);
	if (!rs)
		return RUN_NONE;
	u64 now = bpf_ktime_get_boot_ns();
	for (u32 i = 0; i < RUNS; i++) {
		struct run *r = &rs->r[i];
		if (r->state != RUN_COUNTING || r->dentry != dentry || r->mnt != mnt || r->like != like)
			continue;
		// A REPEAT_NS since the run's last record, this event sends one
		// (one thread wins the exchange of emitted_ns).
		u64 at = r->emitted_ns;
		if (now - at < REPEAT_NS || __sync_val_compare_and_swap(&r->emitted_ns, at, now) != at)
			run_count(r, now);
		else
			run_record(tgid, i, now);
		return RUN_COUNTED;
	}
	for (u32 i = 0; i < RUNS; i++) {
		if (rs->r[i].state == RUN_FREE && __sync_val_compare_and_swap(&rs->r[i].state, RUN_FREE, RUN_CLAIMED) == RUN_FREE)
			return i;
	}
	return RUN_NONE;
}

// run_start makes the slot run_take claimed (slot_like: the slot, then
// like in the low 32 bits) the run of the event sent at at (user space keeps
// that event as the run's template), or frees it again where no event was
// sent (at 0). BPF calls take five arguments at most.
__noinline int run_start(u32 tgid, u64 slot_like, u64 at, u64 dentry, u64 mnt)
{
	struct proc_runs *rs = bpf_map_lookup_elem(&runs, &tgid);
	u32 slot = slot_like >> 32;
	if (!rs || slot >= RUNS)
		return 0;
	struct run *r = &rs->r[slot];
	if (!at) {
		r->state = RUN_FREE;
		return 0;
	}
	r->dentry = dentry;
	r->mnt = mnt;
	r->like = (u32)slot_like;
	r->count = 0;
	r->emitted_ns = at;
	r->state = RUN_COUNTING;
	return 0;
}

// report_file reports an open or mapping of file when it is a device that
// may be an NVIDIA device, and marks the process seen. A like event of a
// run is counted instead (see struct run).
static __always_inline int report_file(struct file *file, u32 kind, s32 fd, u32 flags, u32 prot, u64 length)
{
	if (!file)
		return 0;
	struct inode *inode = BPF_CORE_READ(file, f_inode);
	u32 mode = BPF_CORE_READ(inode, i_mode);
	if (!is_device(mode))
		return 0;
	u32 f_flags = BPF_CORE_READ(file, f_flags);
	if (f_flags & O_PATH)
		return 0;
	dev_t rdev = BPF_CORE_READ(inode, i_rdev);
	u32 major = rdev >> 20, minor = rdev & ((1U << 20) - 1);
	int by_major = (mode & S_IFMT) == S_IFCHR && bpf_map_lookup_elem(&nvidia_majors, &major);
	if (!by_major) {
		// /dev/null, ttys, /dev/urandom: rejected on their name before
		// anything is reserved or walked.
		char base[8] = {};
		bpf_probe_read_kernel_str(base, sizeof(base), BPF_CORE_READ(file, f_path.dentry, d_name.name));
		if (!name_is(base, "nvidia", 6))
			return 0;
	}

	u64 dentry = (u64)BPF_CORE_READ(file, f_path.dentry), mnt = (u64)BPF_CORE_READ(file, f_path.mnt);
	u32 like = like_of(kind, f_flags, flags, prot);
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	u32 tgid = bpf_get_current_pid_tgid() >> 32;
	int slot = run_take(tgid, BPF_CORE_READ(task, group_leader, start_boottime), dentry, mnt, like);
	if (slot == RUN_COUNTED)
		return 0;

	struct event *e = begin(kind);
	if (e)
		fill_path(e, file);
	if (!e || (!by_major && !nvidia_name(e))) {
		if (slot >= 0)
			run_start(tgid, (u64)slot << 32, 0, 0, 0);
		return 0;
	}
	e->rdev_major = major;
	e->rdev_minor = minor;
	e->mode = mode;
	e->fd = fd;
	if (kind == EV_OPEN) {
		e->flags = f_flags;
		e->prot = BPF_CORE_READ(file, f_mode);
	} else {
		e->flags = flags;
		e->prot = prot;
		e->length = length;
	}
	if (!bpf_map_lookup_elem(&seen, &e->pid)) {
		// Its first use of a device: name its exe, and say when it exec'd,
		// if since it started.
		fill_exe(e);
		u64 *at = bpf_map_lookup_elem(&execs, &e->pid);
		if (at && *at >= e->start_ns)
			e->exec_ns = *at;
		bpf_map_update_elem(&seen, &e->pid, &e->start_ns, BPF_ANY);
	}
	if (slot >= 0)
		e->run = slot + 1;
	u64 at = e->time_ns;
	if (!emit(e))
		at = 0;
	if (slot >= 0)
		run_start(tgid, (u64)slot << 32 | like, at, dentry, mnt);
	return 0;
}

// fd_file looks fd up in the current task's descriptor table. It runs on
// every open of the host in tracepoint mode, so the walk to the table is
// direct loads through the task's BTF pointer, not a helper call a field;
// only the slot itself (an array the verifier has no type for) is read with
// bpf_probe_read_kernel.
static __always_inline struct file *fd_file(long fd)
{
	if (fd < 0)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	struct files_struct *files = task->files;
	if (!files)
		return 0;
	struct fdtable *fdt = files->fdt;
	if (!fdt || (u64)fd >= fdt->max_fds)
		return 0;
	struct file **fds = fdt->fd;
	struct file *file = 0;
	bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]);
	return file;
}

// The tracepoint hook: the open family on exit (the descriptor is installed
// by then), mmap on entry.

static __always_inline int on_open_exit(struct trace_event_raw_sys_exit *ctx)
{
	long fd = ctx->ret;
	return report_file(fd_file(fd), EV_OPEN, fd, 0, 0, 0);
}

SEC("tracepoint/syscalls/sys_exit_openat")
int tp_exit_openat(struct trace_event_raw_sys_exit *ctx) { return on_open_exit(ctx); }

SEC("tracepoint/syscalls/sys_exit_openat2")
int tp_exit_openat2(struct trace_event_raw_sys_exit *ctx) { return on_open_exit(ctx); }

SEC("tracepoint/syscalls/sys_exit_open")
int tp_exit_open(struct trace_event_raw_sys_exit *ctx) { return on_open_exit(ctx); }

SEC("tracepoint/syscalls/sys_exit_creat")
int tp_exit_creat(struct trace_event_raw_sys_exit *ctx) { return on_open_exit(ctx); }

SEC("tracepoint/syscalls/sys_exit_open_by_handle_at")
int tp_exit_open_by_handle_at(struct trace_event_raw_sys_exit *ctx) { return on_open_exit(ctx); }

SEC("tracepoint/syscalls/sys_enter_mmap")
int tp_enter_mmap(struct trace_event_raw_sys_enter *ctx)
{
	u64 len = ctx->args[1];
	u32 prot = ctx->args[2], flags = ctx->args[3];
	long fd = (long)ctx->args[4];
	if (flags & MAP_ANONYMOUS)
		return 0;
	return report_file(fd_file(fd), EV_MMAP, fd, flags, prot, len);
}

// io_uring's opens: the completion of IORING_OP_OPENAT and OPENAT2 (res is
// the new descriptor) and of IORING_OP_FIXED_FD_INSTALL (a registered file
// made a descriptor). It runs in a thread of the submitting process (the
// submitter, an io-wq worker or the SQPOLL thread), which shares its
// descriptor table. An open into a registered file slot (file_slot set)
// makes no descriptor and is not seen here.

enum io_uring_opcode {
	OP_OPENAT = 18,
	OP_OPENAT2 = 28,
	OP_FIXED_FD_INSTALL = 54,
};

SEC("tracepoint/io_uring/io_uring_complete")
int tp_io_uring_complete(struct trace_event_raw_io_uring_complete *ctx)
{
	struct io_kiocb *req = ctx->req;
	int res = ctx->res;
	if (!req || res < 0)
		return 0;
	u8 op = BPF_CORE_READ(req, opcode);
	if (op == OP_OPENAT || op == OP_OPENAT2) {
		// The request's command data is its first member: struct io_open.
		if (BPF_CORE_READ((struct io_open *)req, file_slot))
			return 0;
	} else if (op != OP_FIXED_FD_INSTALL) {
		return 0;
	}
	return report_file(fd_file(res), EV_OPEN, res, 0, 0, 0);
}

// 32-bit system calls (an ia32 program, or int 0x80 from a 64-bit one) do
// not reach the syscalls/ tracepoints; the raw sys_exit sees them, by their
// ia32 numbers, while the task is marked TS_COMPAT: opens with the new
// descriptor, and mappings (their arguments are still in the registers, or
// in user memory for old_mmap). This program runs at the exit of every
// system call of the host, so it is one raw tracepoint, not two, and every
// other call leaves it after one load and compare of the call's number: the
// task is only read where the number is one of these.

#define TS_COMPAT 0x0002

enum ia32_syscall {
	IA32_OPEN = 5,
	IA32_CREAT = 8,
	IA32_OLD_MMAP = 90,
	IA32_MMAP2 = 192,
	IA32_OPENAT = 295,
	IA32_OPEN_BY_HANDLE_AT = 342,
	IA32_OPENAT2 = 437,
};

// The arguments of ia32 old_mmap, which takes them from user memory.
struct ia32_mmap_args {
	u32 addr, len, prot, flags, fd, offset;
};

// ia32_mmap reports a 32-bit mapping on its exit.
static __always_inline int ia32_mmap(struct pt_regs *regs, long nr)
{
	struct ia32_mmap_args a = {};
	if (nr == IA32_MMAP2) {
		// ebx addr, ecx len, edx prot, esi flags, edi fd, ebp pgoff.
		a.len = regs->cx;
		a.prot = regs->dx;
		a.flags = regs->si;
		a.fd = regs->di;
	} else if (bpf_probe_read_user(&a, sizeof(a), (void *)regs->bx) < 0) {
		return 0;
	}
	if (a.flags & MAP_ANONYMOUS)
		return 0;
	return report_file(fd_file((s32)a.fd), EV_MMAP, (s32)a.fd, a.flags, a.prot, a.len);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(tp_ia32_exit, struct pt_regs *regs, long ret)
{
	if (!bpf_core_field_exists(regs->orig_ax))
		return 0;
	long nr = regs->orig_ax;
	int open = nr == IA32_OPEN || nr == IA32_OPENAT || nr == IA32_CREAT || nr == IA32_OPEN_BY_HANDLE_AT || nr == IA32_OPENAT2;
	if (!open && nr != IA32_MMAP2 && nr != IA32_OLD_MMAP)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	if (!bpf_core_field_exists(task->thread_info.status) || !(task->thread_info.status & TS_COMPAT))
		return 0;
	if (!open)
		return ret < 0 ? 0 : ia32_mmap(regs, nr);
	return report_file(fd_file(ret), EV_OPEN, ret, 0, 0, 0);
}

// The security hooks see every open and mapping, io_uring's and the
// kernel's on a process's behalf included, but no descriptor; mmap_file has
// no length.

// hook_device is the LSM and fentry programs' first test: their file is a
// BTF pointer, so its inode's type is two direct loads, where report_file's
// reads (helper calls, as a kprobe's or a tracepoint's file needs) cost more
// than the rest of a regular file's open.
static __always_inline int hook_device(struct file *file)
{
	return file && is_device(file->f_inode->i_mode);
}

SEC("lsm/file_open")
int BPF_PROG(lsm_file_open, struct file *file)
{
	if (hook_device(file))
		report_file(file, EV_OPEN, -1, 0, 0, 0);
	return 0;
}

SEC("lsm/mmap_file")
int BPF_PROG(lsm_mmap_file, struct file *file, unsigned long reqprot, unsigned long prot, unsigned long flags)
{
	if (hook_device(file))
		report_file(file, EV_MMAP, -1, flags, prot, 0);
	return 0;
}

SEC("fentry/security_file_open")
int BPF_PROG(fentry_file_open, struct file *file)
{
	if (hook_device(file))
		report_file(file, EV_OPEN, -1, 0, 0, 0);
	return 0;
}

SEC("fentry/security_mmap_file")
int BPF_PROG(fentry_mmap_file, struct file *file, unsigned long prot, unsigned long flags)
{
	if (hook_device(file))
		report_file(file, EV_MMAP, -1, flags, prot, 0);
	return 0;
}

// kprobes on the same security hooks, where the kernel refuses fentry and
// LSM programs: only opens and mappings of files pay for them, where a
// syscall tracepoint sends every system call down the slow path.

// FMODE_ATOMIC_POS: do_dentry_open sets it in f_mode, before the security
// hook, on a regular file or a directory only.
#define FMODE_ATOMIC_POS 0x8000

// kprobe_file's first test: a kprobe's file is a plain pointer, read with
// helper calls, so a regular file (what almost every open is) is told by
// one read, its f_mode, where report_file's type test takes two.
static __always_inline int kprobe_file(struct file *file)
{
	return file && !(BPF_CORE_READ(file, f_mode) & FMODE_ATOMIC_POS);
}

SEC("kprobe/security_file_open")
int BPF_KPROBE(kprobe_file_open, struct file *file)
{
	return kprobe_file(file) ? report_file(file, EV_OPEN, -1, 0, 0, 0) : 0;
}

SEC("kprobe/security_mmap_file")
int BPF_KPROBE(kprobe_mmap_file, struct file *file, unsigned long prot, unsigned long flags)
{
	return kprobe_file(file) ? report_file(file, EV_MMAP, -1, flags, prot, 0) : 0;
}

// Process life, in every mode, reported only for processes seen using a
// device: exec (every exec is noted in execs, for a later first use), fork
// and exit.

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32;
	u64 now = bpf_ktime_get_boot_ns();
	bpf_map_update_elem(&execs, &tgid, &now, BPF_ANY);
	int ran = runs_end(tgid);
	if (!ran && !bpf_map_lookup_elem(&seen, &tgid))
		return 0;
	struct event *e = begin(EV_EXEC);
	if (!e)
		return 0;
	// A device user exec'd: its descriptors may live on in the new program.
	walk_path(e->exe, &e->exe_depth, &e->exe_complete, BPF_CORE_READ(bprm, file));
	emit(e);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	u32 ptgid = BPF_CORE_READ(parent, tgid);
	u32 cpid = BPF_CORE_READ(child, pid), ctgid = BPF_CORE_READ(child, tgid);
	if (cpid != ctgid || !bpf_map_lookup_elem(&seen, &ptgid))
		return 0; // a new thread, or a process that used no device
	// The child inherits its parent's descriptors and mappings.
	u64 cstart = BPF_CORE_READ(child, start_boottime);
	bpf_map_update_elem(&seen, &cpid, &cstart, BPF_ANY);
	struct event *e = begin(EV_FORK);
	if (!e)
		return 0;
	e->child_pid = cpid;
	e->child_start_ns = cstart;
	emit(e);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	u32 tgid = BPF_CORE_READ(p, tgid);
	u64 *started = bpf_map_lookup_elem(&seen, &tgid);
	int used = started && *started == BPF_CORE_READ(p, group_leader, start_boottime);
	if (!used && !bpf_map_lookup_elem(&runs, &tgid))
		return 0;
	// do_exit counts the thread out of signal->live before this tracepoint:
	// zero is the last thread, the process's end.
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	// A process with a run used a device, whether or not seen still holds it.
	if (!runs_end(tgid) && !used)
		return 0;
	bpf_map_delete_elem(&seen, &tgid);
	struct event *e = begin(EV_EXIT);
	if (!e)
		return 0;
	e->flags = BPF_CORE_READ(p, exit_code);
	emit(e);
	return 0;
}
