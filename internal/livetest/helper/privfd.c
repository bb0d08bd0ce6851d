/*
 * privfd [-x] NODE PIDFILE: a process whose device fd lives in a thread's own fd
 * table, for gpusnap's live tests. It clones a thread with CLONE_VM,
 * CLONE_THREAD and CLONE_SIGHAND but without CLONE_FILES (the thread gets a
 * copy of the table, as it was), which opens NODE read-write; the main thread
 * never holds it. /proc/PID/fd, fuser and lsof show the main thread's table
 * only. It writes "tenant PID PID STARTTIME" and "thread TID TID STARTTIME"
 * to PIDFILE (through PIDFILE.tmp) and sleeps until killed. With -x the main
 * thread then exits (the leader is a zombie), and a second thread, which
 * shares the main thread's table, lives on: the process is read through it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *node;
static volatile int ready; /* 1: the thread holds NODE; -1: its open failed */

static void die(const char *what) {
	fprintf(stderr, "privfd: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* The thread shares the main thread's TLS: it makes raw system calls only. */
static int thread(void *arg) {
	(void)arg;
	long fd = syscall(SYS_openat, AT_FDCWD, node, O_RDWR | O_CLOEXEC);
	ready = fd >= 0 ? 1 : -1;
	for (;;)
		syscall(SYS_pause);
	return 0;
}

/* starttime returns field 22 of the stat file at path. */
static unsigned long long starttime(const char *path) {
	char buf[1024], *p;
	size_t n;
	int i;
	FILE *f = fopen(path, "r");
	if (!f)
		die(path);
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')'); /* comm may hold spaces and parentheses */
	for (i = 0; p && i < 20; i++)
		p = strchr(p + 1, ' ');
	if (!p) {
		errno = EINVAL;
		die(path);
	}
	return strtoull(p + 1, NULL, 10);
}

/* sharer shares the main thread's fd table and outlives it, under -x. */
static int sharer(void *arg) {
	(void)arg;
	for (;;)
		syscall(SYS_pause);
	return 0;
}

static int spawn(int (*fn)(void *), int flags) {
	size_t size = 1 << 16;
	char *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	int tid;
	if (stack == MAP_FAILED)
		die("mmap");
	tid = clone(fn, stack + size, CLONE_VM | CLONE_THREAD | CLONE_SIGHAND | CLONE_SYSVSEM | flags, NULL);
	if (tid < 0)
		die("clone");
	return tid;
}

int main(int argc, char **argv) {
	char tmp[4096], stat[64];
	int tid, i, exitleader = argc == 4 && !strcmp(argv[1], "-x");
	FILE *f;
	if (argc != 3 + exitleader) {
		fprintf(stderr, "usage: privfd [-x] NODE PIDFILE\n");
		return 2;
	}
	argv += exitleader;
	node = argv[1];
	if (exitleader)
		spawn(sharer, CLONE_FILES);
	tid = spawn(thread, 0);
	for (i = 0; !ready && i < 10000; i++)
		usleep(1000);
	if (ready != 1) {
		errno = ready ? EACCES : ETIMEDOUT;
		die(node);
	}
	snprintf(stat, sizeof stat, "/proc/self/task/%d/stat", tid);
	snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]);
	f = fopen(tmp, "w");
	if (!f)
		die(tmp);
	fprintf(f, "tenant %d %d %llu\nthread %d %d %llu\n", getpid(), getpid(), starttime("/proc/self/stat"),
		tid, tid, starttime(stat));
	if (fclose(f) || rename(tmp, argv[2]))
		die(argv[2]);
	if (exitleader)
		syscall(SYS_exit, 0); /* this thread only: the others run on */
	for (;;)
		pause();
}
