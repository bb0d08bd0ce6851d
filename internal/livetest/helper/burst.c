// burst: N short-lived GPU workers. `burst N PATH` runs N workers, at most 8
// at a time, each a fork and exec of `burst -w PATH`, which opens PATH
// read-write, maps a page of it MAP_SHARED read-write, and exits at once
// (within a few ms). It prints each worker's PID, one a line, as it starts it.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static int worker(const char *path) {
	int fd = open(path, O_RDWR);
	if (fd < 0) { perror("open"); return 1; }
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) { perror("mmap"); return 1; }
	return 0;
}

int main(int argc, char **argv) {
	if (argc == 3 && strcmp(argv[1], "-w") == 0)
		return worker(argv[2]);
	if (argc != 3) { fprintf(stderr, "usage: burst N PATH\n"); return 2; }
	int n = atoi(argv[1]), running = 0, failed = 0;
	for (int i = 0; i < n; i++) {
		if (running == 8) {
			int st;
			if (wait(&st) > 0) { running--; failed += !WIFEXITED(st) || WEXITSTATUS(st); }
		}
		pid_t pid = fork();
		if (pid < 0) { perror("fork"); return 1; }
		if (pid == 0) {
			execl("/proc/self/exe", argv[0], "-w", argv[2], (char *)NULL);
			_exit(127);
		}
		printf("%d\n", pid);
		running++;
	}
	int st;
	while (wait(&st) > 0)
		failed += !WIFEXITED(st) || WEXITSTATUS(st);
	fflush(stdout);
	if (failed) { fprintf(stderr, "burst: %d workers failed\n", failed); return 1; }
	return 0;
}
