/*
 * tenant: the two costs a hostile tenant controls, for bench/hostile.sh.
 *   tenant maps NODE COUNT PIDFILE   maps NODE COUNT times (4 KiB, read-only,
 *                                    shared, each at offset 0, so no two merge:
 *                                    COUNT lines in maps), writes its PID, sleeps.
 *   tenant argv CHILDREN PIDFILE     re-executes itself with about 5.5 MB of
 *                                    arguments (43 of 128 KiB, the kernel's
 *                                    limit per argument), forks CHILDREN that
 *                                    share those pages, writes their PIDs, sleeps.
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
		/* 5.5 MB of arguments need a stack limit above 4x that. */
		struct rlimit rl = {256 << 20, 256 << 20};
		if (setrlimit(RLIMIT_STACK, &rl))
			die("setrlimit");
		char **args = calloc(ARGS + 5, sizeof *args);
		args[0] = argv[0];
		args[1] = "spread";
		args[2] = argv[2];
		args[3] = argv[3];
		for (int i = 0; i < ARGS; i++) {
			args[4 + i] = malloc(ARGLEN + 1);
			memset(args[4 + i], 'a' + i % 26, ARGLEN);
			args[4 + i][ARGLEN] = 0;
		}
		execv("/proc/self/exe", args);
		die("execv");
	}
	if (argc > 4 && !strcmp(argv[1], "spread")) {
		int n = atoi(argv[2]);
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
		writepids(argv[3], pids, n + 1);
		for (;;)
			pause();
	}
	fprintf(stderr, "usage: tenant maps NODE COUNT PIDFILE | tenant argv CHILDREN PIDFILE\n");
	return 2;
}
