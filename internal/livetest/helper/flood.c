// flood: a tenant's open flood. `flood RATE N PATH` opens PATH read-write
// and closes it N times, RATE times a second (paced on CLOCK_MONOTONIC; 0:
// as fast as it can). It prints its PID first, and when done how many opens
// it made; it exits 1 on a failed open.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
	if (argc != 4) { fprintf(stderr, "usage: flood RATE N PATH\n"); return 2; }
	long rate = atol(argv[1]), n = atol(argv[2]), done = 0;
	printf("%d\n", getpid());
	fflush(stdout);
	long long t0 = now_ns();
	for (long i = 0; i < n; i++) {
		if (rate > 0) {
			long long due = t0 + i * (1000000000LL / rate);
			for (long long left; (left = due - now_ns()) > 0;) {
				struct timespec ts = {0, left > 200000 ? 200000 : left};
				nanosleep(&ts, NULL);
			}
		}
		int fd = open(argv[3], O_RDWR);
		if (fd < 0) { perror("open"); return 1; }
		close(fd);
		done++;
	}
	printf("%ld\n", done);
	return 0;
}
