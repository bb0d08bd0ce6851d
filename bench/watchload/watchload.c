// watchload: the loads bench/watch.sh measures gpusnap watch under.
//   watchload loop PATH N        open and close PATH N times; prints ns per open+close
//   watchload rate PATH RATE S   open and close PATH RATE times a second for S seconds,
//                                paced; prints how many opens it made
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
	if (argc == 4 && strcmp(argv[1], "loop") == 0) {
		long n = atol(argv[3]);
		long long t0 = now_ns();
		for (long i = 0; i < n; i++) {
			int fd = open(argv[2], O_RDONLY);
			if (fd < 0) { perror("open"); return 1; }
			close(fd);
		}
		printf("%.1f\n", (double)(now_ns() - t0) / n);
		return 0;
	}
	if (argc == 5 && strcmp(argv[1], "rate") == 0) {
		long rate = atol(argv[3]), secs = atol(argv[4]), done = 0;
		long long t0 = now_ns(), step = 1000000000LL / rate;
		for (long i = 0; i < rate * secs; i++) {
			long long due = t0 + i * step;
			while (now_ns() < due) {
				struct timespec ts = {0, 100000};
				nanosleep(&ts, NULL);
			}
			int fd = open(argv[2], O_RDWR);
			if (fd < 0) { perror("open"); return 1; }
			close(fd);
			done++;
		}
		printf("%ld\n", done);
		return 0;
	}
	fprintf(stderr, "usage: watchload loop PATH N | watchload rate PATH RATE SECONDS\n");
	return 2;
}
