// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// iter.c: the kernel side of the BPF capture path of `gpusnap snapshot`.
// Three iterators walk the caller's pid namespace once each and write fixed
// records (a header, then the NUL-less bytes of one path, padded to 8 bytes)
// that user space decodes without parsing text:
//
//   iter.s/task     one task_rec per process (thread-group leader): the
//                   identity fields /proc/PID/stat and status give, the
//                   path of its exe and its command line.
//   iter/task       (gpusnap_vmas) one vma_rec per mapping of a device node
//                   or a DMA-buf, and per anonymous executable mapping of
//                   64 MiB or more, each process's walked in one call.
//   iter/task_file  one file_rec per open file that is a device node, and
//                   one (REC_RING, no path) per io_uring, whose registered
//                   files user space reads in the ring's fdinfo.
//
// Where a kernel refuses a program, user space loads its fallback:
// gpusnap_tasks_proc_exe leaves the exe to /proc, gpusnap_vma (iter/task_vma)
// walks mappings one call each, and the _proc_path walks leave a process
// that maps a device or a DMA-buf to /proc (a kernel whose verifier calls
// vma->vm_file untrusted refuses bpf_d_path on it).
//
// Everything else (libraries, sockets, pipes: nearly all of a host) is
// dropped here, which is where the BPF path saves over reading /proc's text.

#include "gpusnap.h"

// Sizes the records' readers rely on (bpf2go writes them into Go).
enum iter_limit {
	PATH_LEN = 4096, // PATH_MAX: d_path fails beyond it, as readlink does
	NSPID_MAX = 8,   // pid namespace levels recorded; deeper ones are flagged
	COMM_LEN = 16,
	CMD_LEN = 4096, // command lines up to this long are copied here; longer ones /proc gives
};

#define DMA_BUF_MAGIC 0x444d4142 // the superblock magic of DMA-buf files
#define ANON_INODE_FS_MAGIC 0x09041934 // the superblock magic of anonymous inodes

#define VM_READ 0x1
#define VM_WRITE 0x2
#define VM_EXEC 0x4
#define VM_MAYSHARE 0x80

#define SUSPECT_ANON_SIZE (64ULL << 20)

// Flags of a record.
enum rec_flag {
	REC_PATH_ERROR = 1, // d_path failed: no path (path_len 0)
	REC_NSPID_DEEP = 2, // more pid namespace levels than NSPID_MAX
	REC_SAME_PATH = 4,  // a mapping of the same file as the record before: its path is that one's
	REC_MM_BUSY = 8,    // VMA_UNWALKED: the mmap lock was held
	REC_TOO_MANY = 16,  // VMA_UNWALKED: more device mappings than one walk writes
	REC_OWN_TABLE = 32, // file_rec: in a thread's own fd table (cloned without CLONE_FILES), not the process's
	REC_CMDLINE = 64,   // task_rec: cmd_len bytes are the whole command line
	REC_NO_SCRATCH = 128, // vma_rec (VMA_UNWALKED), file_rec: no scratch to render it in: read the process from /proc
	REC_EXE_PROC = 256,   // task_rec: the exe was not taken here: read /proc/PID/exe
	REC_RING = 512,       // file_rec: an io_uring instance, no device: its registered files are in its fdinfo
	REC_PATH_PROC = 1024, // VMA_UNWALKED: a mapping of a file this kernel would not name here: read /proc
};

// Kinds of a vma_rec.
enum vma_kind {
	VMA_DEVICE = 1,
	VMA_DMABUF = 2,
	VMA_ANON_EXEC = 3, // path_len bytes are the anon_vma_name, if any
	VMA_UNWALKED = 4,  // the process's mappings were not walked, or not all: read /proc
};

// Keep the enums in the object's BTF, for bpf2go's Go constants.
const enum iter_limit *unused_iter_limit __attribute__((unused));
const enum rec_flag *unused_rec_flag __attribute__((unused));
const enum vma_kind *unused_vma_kind __attribute__((unused));

struct task_rec {
	u64 start_ns;   // start_boottime: stat field 22 is it in clock ticks
	u64 cgroup_key; // the address of the css_set: equal keys, equal /proc/PID/cgroup
	u32 pid;        // the thread-group id (the leader's pid)
	u32 ppid;       // the real parent's thread-group id
	u32 flags;      // PF_* (PF_KTHREAD)
	u32 state;      // __state
	u32 exit_state;
	u32 threads;    // signal->nr_threads: stat field 20
	u32 uid, euid;
	u32 pidns_inum; // the inode of the pid namespace: /proc/PID/ns/pid
	u32 ns_level;   // pid->level: NSpid has ns_level+1 entries
	u32 nspid[NSPID_MAX];
	char comm[COMM_LEN];
	u32 rec_flags;
	u32 path_len; // bytes of the exe path that follow
	u32 cmd_len;  // then bytes of the command line (REC_CMDLINE)
	u32 pad;
};

struct vma_rec {
	u64 start, end;
	u64 pgoff;
	u64 ino;   // the mapped inode's number: the maps inode field
	u32 pid;   // thread-group id
	u32 tid;   // the task walked: threads of a process whose leader has exited each walk its mm
	u32 s_dev; // the filesystem's device (kernel encoding): the maps dev field
	u32 rdev;  // the device's own number (kernel encoding)
	u32 mode;  // i_mode
	u32 vm_flags;
	u32 kind;
	u32 rec_flags;
	u32 path_len;
	u32 pad;
};

struct file_rec {
	u64 files_key; // the address of the fd table: threads sharing one have the same
	u32 pid;
	u32 tid;
	u32 fd;
	u32 rdev;
	u32 mode;
	u32 flags; // f_flags, with O_CLOEXEC where the fd is close-on-exec: fdinfo's flags
	u32 rec_flags;
	u32 path_len;
};

// A flavour of vm_area_struct for kernels built with CONFIG_ANON_VMA_NAME.
struct anon_vma_name___named {
	char name[64];
} __attribute__((preserve_access_index));
struct vm_area_struct___named {
	struct anon_vma_name___named *anon_name;
} __attribute__((preserve_access_index));

// scratch holds one record, its path and a command line: too big for the
// 512-byte stack. It is the reading thread's own (task storage), not the
// CPU's: the task iterator sleeps to copy command lines, a long walk of
// mappings may be preempted, and meanwhile another capture's read could run
// on this CPU and overwrite a per-CPU scratch under it. A thread runs one of
// these programs at a time.
struct scratch {
	union {
		struct task_rec task;
		struct vma_rec vma;
		struct file_rec file;
	};
	// Twice their longest, a power of two: an index masked by the size is
	// bounded for every verifier (6.1's loses the bound a compare gave).
	char path[2 * PATH_LEN];
	char cmd[2 * CMD_LEN];
	// The state of gpusnap_vmas's walk of one process.
	u64 last_file; // the file of the record before, whose path it wrote
	u32 out;       // bytes of records written
	u32 unwalked;  // REC_MM_BUSY or REC_TOO_MANY: the walk stopped
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct scratch);
} scratch_map SEC(".maps");

// get_scratch is the reading thread's scratch, made on its first use; nil
// where the kernel could not allocate it (each program then says so in a
// record of its own, so that user space reads the process from /proc).
static __always_inline struct scratch *get_scratch(void)
{
	return bpf_task_storage_get(&scratch_map, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
}

// write_padded writes n bytes of buf, at most half its size (a power of
// two), and NULs up to the next multiple of 8, so the next record stays
// aligned; nothing where n is 0.
static __always_inline void write_padded(struct seq_file *seq, char *buf, u32 n, u32 size)
{
	if (n == 0 || n > size / 2)
		return;
	// barrier_var keeps clang from dropping a mask it proves redundant
	// from the test above, which 6.1's verifier does not follow.
	for (u32 i = 0; i < 8; i++) {
		u32 j = n + i;
		barrier_var(j);
		buf[j & (size - 1)] = 0;
	}
	u32 padded = (n + 7) & ~7U;
	barrier_var(padded);
	bpf_seq_write(seq, buf, padded & (size - 1));
}

// emit writes a record of hdr_len bytes, then path_len bytes of s->path.
static __always_inline void emit(struct seq_file *seq, struct scratch *s, u32 hdr_len, u32 path_len)
{
	bpf_seq_write(seq, s, hdr_len);
	write_padded(seq, s->path, path_len, sizeof(s->path));
}

// put_path renders path into s->path; it returns the length without the
// NUL, and sets REC_PATH_ERROR in *flags where d_path failed.
static __always_inline u32 put_path(struct scratch *s, const struct path *path, u32 *flags)
{
	long n = bpf_d_path((struct path *)path, s->path, PATH_LEN);
	if (n <= 1 || n > PATH_LEN) {
		*flags |= REC_PATH_ERROR;
		return 0;
	}
	return (u32)n - 1;
}

extern void bpf_rcu_read_lock(void) __ksym;
extern void bpf_rcu_read_unlock(void) __ksym;

// task_rec_of writes the record of a thread-group leader. With kernel_exe
// it renders the exe in an RCU read section (mm->exe_file is trusted only
// there); without, it sets REC_EXE_PROC and user space reads
// /proc/PID/exe: a kernel without bpf_rcu_read_lock (6.1), or whose BTF
// marks exe_file __rcu so that the verifier refuses d_path on it.
static __always_inline int task_rec_of(struct bpf_iter__task *ctx, const int kernel_exe)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;
	if (!task || task->pid != task->tgid)
		return 0;
	// Without a scratch no record: /proc's listing has the process, and
	// user space reads every listed process the walk lacks from /proc.
	struct scratch *s = get_scratch();
	if (!s)
		return 0;
	struct task_rec *r = &s->task;
	__builtin_memset(r, 0, sizeof(*r));
	r->start_ns = task->start_boottime;
	r->cgroup_key = (u64)task->cgroups;
	r->pid = task->tgid;
	r->ppid = task->real_parent ? task->real_parent->tgid : 0;
	r->flags = task->flags;
	r->state = task->__state;
	r->exit_state = task->exit_state;
	r->threads = task->signal ? task->signal->nr_threads : 0;
	const struct cred *cred = task->cred;
	if (cred) {
		r->uid = cred->uid.val;
		r->euid = cred->euid.val;
	}
	struct pid *pid = task->thread_pid;
	if (pid) {
		u32 level = pid->level;
		r->ns_level = level;
		if (level >= NSPID_MAX)
			r->rec_flags |= REC_NSPID_DEEP;
		for (u32 i = 0; i < NSPID_MAX && i <= level; i++)
			r->nspid[i] = BPF_CORE_READ(pid, numbers[i].nr);
		if (level < NSPID_MAX * 4)
			r->pidns_inum = BPF_CORE_READ(pid, numbers[level].ns, ns.inum);
	}
	bpf_probe_read_kernel_str(r->comm, sizeof(r->comm), task->comm);
	u32 len = 0, cmd = 0;
	struct mm_struct *mm;
	if (kernel_exe) {
		bpf_rcu_read_lock();
		mm = task->mm;
		if (mm) {
			struct file *exe = mm->exe_file;
			if (exe) {
				long n = bpf_d_path((struct path *)&exe->f_path, s->path, PATH_LEN);
				if (n <= 1 || n > PATH_LEN)
					r->rec_flags |= REC_PATH_ERROR;
				else
					len = (u32)n - 1;
			}
		}
		bpf_rcu_read_unlock();
	} else {
		r->rec_flags |= REC_EXE_PROC;
	}
	mm = task->mm;
	if (mm) {
		// The command line as /proc/PID/cmdline gives it (get_mm_cmdline):
		// nothing before exec has set env_end or where the arguments are
		// empty, else arg_start to arg_end where its last byte is a NUL.
		// One that is longer than CMD_LEN, or rewritten past its end
		// (setproctitle), or that cannot be copied, is left to /proc.
		u64 start = mm->arg_start, end = mm->arg_end;
		if (!mm->env_end || start >= end) {
			r->rec_flags |= REC_CMDLINE;
		} else if (end - start <= CMD_LEN) {
			u32 n = end - start;
			// An exec meanwhile gives the task another mm: what was
			// copied is then no command line of either.
			if (n > 0 && n <= CMD_LEN && bpf_copy_from_user_task(s->cmd, n, (void *)start, task, 0) == 0 &&
			    s->cmd[(n - 1) & (CMD_LEN - 1)] == 0 && task->mm == mm && mm->arg_start == start &&
			    mm->arg_end == end) {
				cmd = n;
				r->rec_flags |= REC_CMDLINE;
			}
		}
	}
	r->path_len = len;
	r->cmd_len = cmd;
	emit(seq, s, sizeof(*r), len);
	write_padded(seq, s->cmd, cmd, sizeof(s->cmd));
	return 0;
}

// The task iterator, best first: user space loads the first the kernel takes.
SEC("iter.s/task")
int gpusnap_tasks(struct bpf_iter__task *ctx) { return task_rec_of(ctx, 1); }

SEC("iter.s/task")
int gpusnap_tasks_proc_exe(struct bpf_iter__task *ctx) { return task_rec_of(ctx, 0); }

extern int bpf_iter_task_vma_new(struct bpf_iter_task_vma *it, struct task_struct *task, u64 addr) __ksym;
extern struct vm_area_struct *bpf_iter_task_vma_next(struct bpf_iter_task_vma *it) __ksym;
extern void bpf_iter_task_vma_destroy(struct bpf_iter_task_vma *it) __ksym;

// vma_kind is the kind of record a mapping makes, or 0 for none.
static __always_inline u32 vma_kind(struct vm_area_struct *vma)
{
	struct file *file = vma->vm_file;
	if (file) {
		struct inode *inode = file->f_inode;
		if (is_device(inode->i_mode))
			return VMA_DEVICE;
		if (inode->i_sb->s_magic == DMA_BUF_MAGIC)
			return VMA_DMABUF;
		return 0;
	}
	if (!(vma->vm_flags & VM_EXEC) || vma->vm_end - vma->vm_start < SUSPECT_ANON_SIZE)
		return 0;
	// Named mappings are no anonymous memory to maps: [vdso], [heap], [stack].
	const struct vm_operations_struct *ops = vma->vm_ops;
	if (ops && ops->name)
		return 0;
	struct mm_struct *mm = vma->vm_mm;
	if (!mm)
		return 0;
	if (vma->vm_start <= mm->brk && vma->vm_end >= mm->start_brk)
		return 0;
	if (vma->vm_start <= mm->start_stack && vma->vm_end >= mm->start_stack)
		return 0;
	return VMA_ANON_EXEC;
}

// fill_vma writes the record of a mapping into s->vma and its path into
// s->path, and returns the path's length. With same_path, a mapping of the
// file the record before was of gets REC_SAME_PATH and no path: only where
// that record is in the same call's output, which the kernel keeps or drops
// whole. Without kernel_path the path is not rendered (REC_PATH_ERROR):
// the _proc_path walks send a file's mappings to /proc before.
static __always_inline u32 fill_vma(struct scratch *s, struct task_struct *task, struct vm_area_struct *vma, u32 kind,
				    const int same_path, const int kernel_path)
{
	struct vma_rec *r = &s->vma;
	__builtin_memset(r, 0, sizeof(*r));
	struct file *file = vma->vm_file;
	r->start = vma->vm_start;
	r->end = vma->vm_end;
	r->pgoff = vma->vm_pgoff;
	r->pid = task->tgid;
	r->tid = task->pid;
	r->vm_flags = (u32)vma->vm_flags;
	r->kind = kind;
	u32 len = 0;
	if (file) {
		struct inode *inode = file->f_inode;
		r->ino = inode->i_ino;
		r->s_dev = inode->i_sb->s_dev;
		r->rdev = inode->i_rdev;
		r->mode = inode->i_mode;
		// A run of mappings of one file (a tenant's 100,000) renders
		// its path once.
		if (same_path && (u64)file == s->last_file)
			r->rec_flags |= REC_SAME_PATH;
		else if (kernel_path)
			len = put_path(s, &file->f_path, &r->rec_flags);
		else
			r->rec_flags |= REC_PATH_ERROR;
	} else if (bpf_core_field_exists(((struct vm_area_struct___named *)vma)->anon_name)) {
		struct anon_vma_name___named *an = BPF_CORE_READ((struct vm_area_struct___named *)vma, anon_name);
		if (an) {
			long n = bpf_probe_read_kernel_str(s->path, sizeof(an->name), an->name);
			if (n > 1)
				len = (u32)n - 1;
		}
	}
	r->path_len = len;
	return len;
}

// vma_walked is whether task is the one whose mappings its process's
// records come from: threads share the leader's mm, so the leader's, unless
// it has exited and left its live threads to walk it.
static __always_inline int vma_walked(struct task_struct *task)
{
	return task->mm && (task->pid == task->tgid || !task->group_leader->mm);
}

// vma_scratch is get_scratch for the mapping walks: without one, it writes
// the record that sends the process to /proc.
static __always_inline struct scratch *vma_scratch(struct seq_file *seq, struct task_struct *task)
{
	struct scratch *s = get_scratch();
	if (!s) {
		struct vma_rec m = {.pid = task->tgid, .tid = task->pid, .kind = VMA_UNWALKED, .rec_flags = REC_NO_SCRATCH};
		bpf_seq_write(seq, &m, sizeof(m));
	}
	return s;
}

// emit_unwalked writes the VMA_UNWALKED record of task's process, flagged
// why: user space then reads the process from /proc.
static __always_inline void emit_unwalked(struct seq_file *seq, struct scratch *s, struct task_struct *task, u32 why)
{
	struct vma_rec *r = &s->vma;
	__builtin_memset(r, 0, sizeof(*r));
	r->pid = task->tgid;
	r->tid = task->pid;
	r->kind = VMA_UNWALKED;
	r->rec_flags = why;
	emit(seq, s, sizeof(*r), 0);
}

// The mappings of each process are walked inside one call of a task
// iterator (the open-coded task_vma iterator), not one program call per
// mapping: nearly all mappings are dismissed by vma_kind. The records of one
// call are written all or none (the kernel re-runs a call whose output
// overflowed its read's buffer, in a fresh one), so one call's output must fit
// one seq buffer: a process with more device mappings than MAX_VMA_OUT bytes
// of records holds gets a VMA_UNWALKED record after them, and is read from
// /proc instead. So does one whose mmap lock was held (the iterator only
// tries it).
#define MAX_VMA_OUT (24 << 10)

// walk_vmas is the open-coded walk of task's mappings. Without
// kernel_path, a mapping of a file (a device, a DMA-buf) ends the walk with
// a VMA_UNWALKED record flagged REC_PATH_PROC instead of its own.
static __always_inline int walk_vmas(struct bpf_iter__task *ctx, const int kernel_path)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;
	if (!task || !vma_walked(task))
		return 0;
	struct scratch *s = vma_scratch(seq, task);
	if (!s)
		return 0;
	// The walk's state lives in the scratch map, not in registers: the
	// verifier then sees one state per loop iteration, not one per count.
	s->out = 0;
	s->last_file = 0;
	s->unwalked = 0;
	struct vm_area_struct *vma;
	struct bpf_iter_task_vma it;
	if (bpf_iter_task_vma_new(&it, task, 0) != 0)
		s->unwalked = REC_MM_BUSY;
	while ((vma = bpf_iter_task_vma_next(&it))) {
		u32 kind = vma_kind(vma);
		if (!kind)
			continue;
		if (!kernel_path && kind != VMA_ANON_EXEC) {
			s->unwalked = REC_PATH_PROC;
			break;
		}
		u32 len = fill_vma(s, task, vma, kind, 1, kernel_path);
		struct vma_rec *r = &s->vma;
		struct file *file = vma->vm_file;
		u32 size = sizeof(*r) + ((len + 7) & ~7U);
		if (s->out + size > MAX_VMA_OUT) {
			s->unwalked = REC_TOO_MANY;
			break;
		}
		emit(seq, s, sizeof(*r), len);
		s->out += size;
		s->last_file = (u64)file;
	}
	bpf_iter_task_vma_destroy(&it);
	if (s->unwalked)
		emit_unwalked(seq, s, task, s->unwalked);
	return 0;
}

SEC("iter/task")
int gpusnap_vmas(struct bpf_iter__task *ctx) { return walk_vmas(ctx, 1); }

SEC("iter/task")
int gpusnap_vmas_proc_path(struct bpf_iter__task *ctx) { return walk_vmas(ctx, 0); }

// gpusnap_vma is the walk of mappings for kernels without the open-coded
// task_vma iterator (before 6.7): the task_vma iterator calls it once a
// mapping. Each call's record stands alone (no REC_SAME_PATH: a call whose
// output overflowed a read's buffer is run again in the next, so no record
// may lean on the one before), and the kernel waits for a held mmap lock.
// Without kernel_path, a mapping of a file makes a VMA_UNWALKED record
// flagged REC_PATH_PROC instead of its own.
static __always_inline int vma_rec_of(struct bpf_iter__task_vma *ctx, const int kernel_path)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;
	struct vm_area_struct *vma = ctx->vma;
	if (!task || !vma || !vma_walked(task))
		return 0;
	u32 kind = vma_kind(vma);
	if (!kind)
		return 0;
	struct scratch *s = vma_scratch(seq, task);
	if (!s)
		return 0;
	if (!kernel_path && kind != VMA_ANON_EXEC) {
		emit_unwalked(seq, s, task, REC_PATH_PROC);
		return 0;
	}
	u32 len = fill_vma(s, task, vma, kind, 0, kernel_path);
	emit(seq, s, sizeof(s->vma), len);
	return 0;
}

SEC("iter/task_vma")
int gpusnap_vma(struct bpf_iter__task_vma *ctx) { return vma_rec_of(ctx, 1); }

SEC("iter/task_vma")
int gpusnap_vma_proc_path(struct bpf_iter__task_vma *ctx) { return vma_rec_of(ctx, 0); }

// is_ring says whether file is an io_uring instance: an anonymous inode
// whose dentry is named "[io_uring]", as its fd's link shows it. The name is
// the kernel's (anon_inode_getfile's), not a tenant's; the files a ring has
// registered have no fd of their own, so only the ring's fdinfo lists them.
static __always_inline int is_ring(struct file *file)
{
	static const char ring_name[] = "[io_uring]";
	char name[sizeof(ring_name)] = {};
	struct dentry *d = file->f_path.dentry;
	if (file->f_inode->i_sb->s_magic != ANON_INODE_FS_MAGIC || !d || d->d_name.len != sizeof(ring_name) - 1)
		return 0;
	if (bpf_probe_read_kernel(name, sizeof(name) - 1, d->d_name.name) != 0)
		return 0;
	for (u32 i = 0; i < sizeof(ring_name) - 1; i++)
		if (name[i] != ring_name[i])
			return 0;
	return 1;
}

SEC("iter/task_file")
int gpusnap_files(struct bpf_iter__task_file *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;
	struct file *file = ctx->file;
	if (!task || !file)
		return 0;
	// The iterator already skips threads sharing the leader's fd table. A
	// thread with a table of its own (cloned without CLONE_FILES) holds fds
	// that /proc/PID/fd, fuser and lsof do not show: they are written too,
	// marked as the thread's. Where the leader has exited, every live thread
	// is walked, and user space keeps one (the table the process is read by).
	u32 own = task->pid != task->tgid && task->group_leader->files ? REC_OWN_TABLE : 0;
	struct inode *inode = file->f_inode;
	u32 mode = inode->i_mode;
	if (!is_device(mode)) {
		if (is_ring(file)) {
			struct file_rec m = {.pid = task->tgid, .tid = task->pid, .fd = ctx->fd, .rec_flags = REC_RING | own};
			bpf_seq_write(seq, &m, sizeof(m));
		}
		return 0;
	}
	struct scratch *s = get_scratch();
	if (!s) {
		struct file_rec m = {.pid = task->tgid, .tid = task->pid, .fd = ctx->fd, .rec_flags = REC_NO_SCRATCH | own};
		bpf_seq_write(seq, &m, sizeof(m));
		return 0;
	}
	struct file_rec *r = &s->file;
	__builtin_memset(r, 0, sizeof(*r));
	r->files_key = (u64)task->files;
	r->rec_flags = own;
	u32 fd = ctx->fd;
	r->pid = task->tgid;
	r->tid = task->pid;
	r->fd = fd;
	r->rdev = inode->i_rdev;
	r->mode = mode;
	u32 flags = file->f_flags;
	struct files_struct *files = task->files;
	if (files) {
		unsigned long *cloexec = BPF_CORE_READ(files, fdt, close_on_exec);
		unsigned long word = 0;
		if (cloexec && bpf_probe_read_kernel(&word, sizeof(word), cloexec + fd / 64) == 0 &&
		    (word >> (fd % 64)) & 1)
			flags |= O_CLOEXEC;
	}
	r->flags = flags;
	u32 len = put_path(s, &file->f_path, &r->rec_flags);
	r->path_len = len;
	emit(seq, s, sizeof(*r), len);
	return 0;
}
