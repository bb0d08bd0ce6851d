/*
 * tenant: the two costs a hostile tenant controls, for bench/hostile.sh.
 *   tenant maps NODE COUNT PIDFILE   maps NODE COUNT times (4 KiB, read-only,
 *                                    shared, each at offset 0, so no two merge:
 *                                    COUNT lines in maps), writes its PID, sleeps.
 *   tenant argv CHILDREN PIDFILE     re-executes itself with about 5.5 MB of
 *                                    arguments (43 of 128 KiB, the kernel's
 *                                    limit per argument), forks CHILDREN that
 *                                    share those pages, writes their PIDs, sleeps.
 *   tenant gpu NODE COUNT CHILDREN PIDFILE
 *                                    both at once, on the GPU: re-executes itself
 *                                    with the 5.5 MB of arguments, maps NODE COUNT
 *                                    times (one of them writable), holds it open
 *                                    FDS times, then forks CHILDREN that inherit it
 *                                    all: every process at every per-process bound
 *                                    (fixtures/hostile's bundle test).
 * The caller kills what PIDFILE names, by PID.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

static void die(const char *what) {
	fprintf(stderr, "tenant: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void writepids(const char *path, pid_t *pids, int n) {
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		die(tmp);
	for (int i = 0; i < n; i++)
		fprintf(f, "%d\n", pids[i]);
	if (fclose(f) || rename(tmp, path))
		die(path);
}

#define ARGS 43
#define ARGLEN (128 * 1024 - 1)
#define FDS 1000

/* reexec runs this program again as MODE with rest (at most three, NULL-ended) and
 * about 5.5 MB of arguments after them; 5.5 MB need a stack limit above 4x
 * that. */
static void reexec(char *self, char *mode, char **rest) {
	struct rlimit rl = {256 << 20, 256 << 20};
	if (setrlimit(RLIMIT_STACK, &rl))
		die("setrlimit");
	char **args = calloc(ARGS + 6, sizeof *args);
	args[0] = self;
	args[1] = mode;
	int first = 2;
	for (; first < 5 && rest[first - 2]; first++)
		args[first] = rest[first - 2];
	for (int i = 0; i < ARGS; i++) {
		args[first + i] = malloc(ARGLEN + 1);
		memset(args[first + i], 'a' + i % 26, ARGLEN);
		args[first + i][ARGLEN] = 0;
	}
	execv("/proc/self/exe", args);
	die("execv");
}

/* spread forks n children that sleep, writes their PIDs and its own to
 * pidfile, and sleeps. */
static void spread(int n, const char *pidfile) {
	pid_t *pids = calloc(n + 1, sizeof *pids);
	pids[0] = getpid();
	for (int i = 1; i <= n; i++) {
		pids[i] = fork();
		if (pids[i] < 0)
			die("fork");
		if (pids[i] == 0)
			for (;;)
				pause();
	}
	writepids(pidfile, pids, n + 1);
	for (;;)
		pause();
}

int main(int argc, char **argv) {
	if (argc == 5 && !strcmp(argv[1], "maps")) {
		int fd = open(argv[2], O_RDONLY);
		if (fd < 0)
			die(argv[2]);
		long n = atol(argv[3]);
		for (long i = 0; i < n; i++)
			if (mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED)
				die("mmap");
		pid_t self = getpid();
		writepids(argv[4], &self, 1);
		for (;;)
			pause();
	}
	if (argc == 4 && !strcmp(argv[1], "argv")) {
		char *rest[] = {argv[2], argv[3], NULL};
		reexec(argv[0], "spread", rest);
	}
	if (argc > 4 && !strcmp(argv[1], "spread"))
		spread(atoi(argv[2]), argv[3]);
	if (argc == 6 && !strcmp(argv[1], "gpu")) {
		/* reexec carries three arguments; the PID file goes in the
		 * environment. */
		char *kept[] = {argv[2], argv[3], argv[4], NULL};
		if (setenv("TENANT_PIDFILE", argv[5], 1))
			die("setenv");
		reexec(argv[0], "gpuspread", kept);
	}
	if (argc > 5 && !strcmp(argv[1], "gpuspread")) {
		int fd = open(argv[2], O_RDWR);
		if (fd < 0)
			die(argv[2]);
		long n = atol(argv[3]);
		if (mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED)
			die("mmap");
		for (long i = 1; i < n; i++)
			if (mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED)
				die("mmap");
		for (int i = 0; i < FDS; i++)
			if (dup(fd) < 0)
				die("dup");
		spread(atoi(argv[4]), getenv("TENANT_PIDFILE"));
	}
	fprintf(stderr, "usage: tenant maps NODE COUNT PIDFILE | tenant argv CHILDREN PIDFILE | tenant gpu NODE COUNT CHILDREN PIDFILE\n");
	return 2;
}
