// blind: device users that the syscall tracepoints alone do not see.
// `blind uring PATH` opens PATH read-write twice through io_uring's
// IORING_OP_OPENAT (inline, then forced to an io-wq worker with IOSQE_ASYNC),
// with raw system calls: no liburing. `blind plain PATH` opens PATH
// read-write and maps a page of it shared: built with -m32, these are
// 32-bit calls (openat and mmap2 by their ia32 numbers). Each prints its PID
// and exits 0 once done.
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef __NR_io_uring_setup
static int uring_open(const char *path) {
	struct io_uring_params p;
	memset(&p, 0, sizeof(p));
	int ring = syscall(__NR_io_uring_setup, 4, &p);
	if (ring < 0) { perror("io_uring_setup"); return 1; }
	char *sq = mmap(NULL, p.sq_off.array + p.sq_entries * sizeof(unsigned), PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQ_RING);
	char *cq = mmap(NULL, p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe), PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_CQ_RING);
	struct io_uring_sqe *sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
					 MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQES);
	if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) { perror("mmap ring"); return 1; }
	unsigned *tail = (unsigned *)(sq + p.sq_off.tail), *array = (unsigned *)(sq + p.sq_off.array);
	unsigned mask = *(unsigned *)(sq + p.sq_off.ring_mask), cmask = *(unsigned *)(cq + p.cq_off.ring_mask);
	unsigned *chead = (unsigned *)(cq + p.cq_off.head);
	struct io_uring_cqe *cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
	for (int i = 0; i < 2; i++) {
		struct io_uring_sqe *sqe = &sqes[i];
		memset(sqe, 0, sizeof(*sqe));
		sqe->opcode = IORING_OP_OPENAT;
		sqe->fd = AT_FDCWD;
		sqe->addr = (unsigned long)path;
		sqe->open_flags = O_RDWR;
		sqe->flags = i ? IOSQE_ASYNC : 0;
		unsigned t = *tail;
		array[t & mask] = i;
		__atomic_store_n(tail, t + 1, __ATOMIC_RELEASE);
		if (syscall(__NR_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0) { perror("io_uring_enter"); return 1; }
		unsigned h = __atomic_load_n(chead, __ATOMIC_ACQUIRE);
		int res = cqes[h & cmask].res;
		__atomic_store_n(chead, h + 1, __ATOMIC_RELEASE);
		if (res < 0) { fprintf(stderr, "IORING_OP_OPENAT: %s\n", strerror(-res)); return 1; }
	}
	return 0;
}
#endif

static int plain(const char *path) {
	int fd = open(path, O_RDWR);
	if (fd < 0) { perror("open"); return 1; }
	void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) { perror("mmap"); return 1; }
	return 0;
}

int main(int argc, char **argv) {
	if (argc != 3) { fprintf(stderr, "usage: blind uring|plain PATH\n"); return 2; }
	printf("%d\n", getpid());
	fflush(stdout);
#ifdef __NR_io_uring_setup
	if (strcmp(argv[1], "uring") == 0)
		return uring_open(argv[2]);
#endif
	if (strcmp(argv[1], "plain") == 0)
		return plain(argv[2]);
	fprintf(stderr, "blind: no mode %s here\n", argv[1]);
	return 2;
}
