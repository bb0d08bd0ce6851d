/*
 * tenant: a workload that uses a device the way a GPU job does, for gpusnap's
 * live tests. It opens NODE read-write and maps it MAP_SHARED read-write (a
 * "rw-s" line in maps), and opens it a second time read-only, so a holder of
 * each access mode exists. Then:
 *   without -g: it writes "tenant HOSTPID NSPID STARTTIME" to PIDFILE and sleeps.
 *   with -g:    it forks a child that calls setsid() and sleeps, inheriting the
 *               mapping and both fds by fork alone (no exec); the parent writes
 *               "tenant ..." and "ghost ..." to PIDFILE and exits, so the child
 *               is a true ghost that survives its parent.
 * -n NAME renames the ghost (prctl PR_SET_NAME), as a miner calls itself python3;
 *    without -g, the tenant itself.
 * -c PORT listens on 127.0.0.1:PORT, connects to it and accepts (before any fork,
 *    so a ghost inherits it): an established TCP connection to PORT (a stratum
 *    port) in the process's network namespace.
 * -N (with -c): then move to a fresh network namespace (unshare CLONE_NEWNET),
 *    as a miner hides its pool connection: the sockets stay in the namespace
 *    they were made in, which /proc/PID/net no longer shows.
 * -s (with -g): the ghost does not call setsid(): it stays in its job's session,
 *    as a DataLoader worker does, and is only reparented.
 * -m COUNT maps NODE COUNT more times, 4 KiB read-only each at offset 0 (so the
 *    kernel merges none of them: COUNT more lines in maps), as a hostile
 *    tenant floods a capture with mappings of one device.
 * -t (without -g): after writing PIDFILE, start three threads that sleep and
 *    end the main thread (pthread_exit): the leader is a zombie while the
 *    threads keep the mapping and both fds, and /proc/PID shows none of them.
 * -u: instead, open NODE read-write, register the fd with an io_uring
 *    (IORING_REGISTER_FILES), close it, write PIDFILE and sleep: /proc/PID/fd
 *    shows only anon_inode:[io_uring], whose fdinfo lists the file.
 * -H: instead, become a child subreaper in a process group of its own, fork a
 *    child that maps 64 KiB of NODE MAP_SHARED read-write, closes the fd, then
 *    forks and exits every 50-500 us: one process maps NODE at every instant,
 *    under a new PID each time. Once the child has mapped NODE, write PIDFILE
 *    and reap. Kill the group.
 * -p FD names an fd open on the host's /proc: inside a pid namespace it turns
 * the process's own PID into the host PID (readlink of "self" answers in the
 * namespace of the proc mount). PIDFILE is written to PIDFILE.tmp and renamed,
 * so a reader never sees half of it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <linux/io_uring.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int procfd = -1;

static void *sleeper(void *arg) {
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

static void die(const char *what) {
	fprintf(stderr, "tenant: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* starttime returns field 22 of /proc/self/stat: with the PID, the process's identity. */
static unsigned long long starttime(void) {
	char buf[1024], *p;
	size_t n;
	int i;
	FILE *f = fopen("/proc/self/stat", "r");
	if (!f)
		die("/proc/self/stat");
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	/* comm may hold spaces and parentheses: fields resume after the last ')' */
	p = strrchr(buf, ')');
	for (i = 0; p && i < 20; i++) /* the 20th space after it precedes field 22 */
		p = strchr(p + 1, ' ');
	if (!p) {
		errno = EINVAL;
		die("/proc/self/stat");
	}
	return strtoull(p + 1, NULL, 10);
}

/* hostpid returns the PID as the host's /proc names it, or getpid() without -p. */
static long hostpid(void) {
	char buf[32];
	ssize_t n;
	if (procfd < 0)
		return (long)getpid();
	n = readlinkat(procfd, "self", buf, sizeof buf - 1);
	if (n < 0)
		die("readlink host /proc/self");
	buf[n] = 0;
	return strtol(buf, NULL, 10);
}

static void connectself(int port) {
	struct sockaddr_in a;
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || c < 0)
		die("socket");
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 1) != 0)
		die("bind");
	if (connect(c, (struct sockaddr *)&a, sizeof a) != 0)
		die("connect");
	if (accept(l, NULL, NULL) < 0)
		die("accept");
}

static void writepids(const char *file, const char *lines) {
	char tmp[PATH_MAX];
	FILE *f;
	snprintf(tmp, sizeof tmp, "%s.tmp", file);
	f = fopen(tmp, "w");
	if (!f)
		die(tmp);
	fputs(lines, f);
	if (fclose(f) != 0)
		die(tmp);
	if (rename(tmp, file) != 0)
		die(file);
}

/* registered holds node only as a file registered with an io_uring (-u). */
static void registered(const char *node, const char *pidfile) {
	struct io_uring_params params;
	char lines[128];
	int ring, fd;
	memset(&params, 0, sizeof params);
	ring = syscall(__NR_io_uring_setup, 4, &params);
	if (ring < 0)
		die("io_uring_setup");
	fd = open(node, O_RDWR);
	if (fd < 0)
		die(node);
	if (syscall(__NR_io_uring_register, ring, IORING_REGISTER_FILES, &fd, 1) < 0)
		die("io_uring_register");
	close(fd);
	snprintf(lines, sizeof lines, "tenant %ld %ld %llu\n", hostpid(), (long)getpid(), starttime());
	writepids(pidfile, lines);
	for (;;)
		pause();
}

/* hop maps node, closes the fd, says so on ready (a byte, then closed), then
 * forks and exits every 50-500 us (-H). */
static void hop(const char *node, int ready) {
	struct timespec ts = {0, 0};
	int fd = open(node, O_RDWR);
	if (fd < 0)
		die(node);
	if (mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED)
		die("mmap");
	close(fd);
	if (write(ready, "m", 1) != 1)
		die("ready");
	close(ready);
	srand(getpid());
	for (;;) {
		ts.tv_nsec = (50 + rand() % 451) * 1000L;
		nanosleep(&ts, NULL);
		pid_t c = fork();
		if (c > 0)
			_exit(0);
		/* c < 0: out of PIDs for a moment; stay and try again */
	}
}

/* hopper is the subreaper of a hop chain (-H). It writes PIDFILE only once
 * the chain maps the node: a capture started as soon as the file is there
 * must find a mapping to chase, even on a loaded host where the child runs
 * late. */
static void hopper(const char *node, const char *pidfile) {
	char lines[128], c;
	int ready[2];
	if (setpgid(0, 0) != 0 || prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
		die("subreaper");
	if (pipe(ready) != 0)
		die("pipe");
	switch (fork()) {
	case -1:
		die("fork");
	case 0:
		close(ready[0]);
		hop(node, ready[1]);
	}
	close(ready[1]);
	if (read(ready[0], &c, 1) != 1)
		die("the hop chain did not map the node");
	close(ready[0]);
	snprintf(lines, sizeof lines, "tenant %ld %ld %llu\n", hostpid(), (long)getpid(), starttime());
	writepids(pidfile, lines);
	for (;;)
		if (wait(NULL) < 0 && errno == ECHILD)
			pause();
}

int main(int argc, char **argv) {
	int ghost = 0, threads = 0, ring = 0, hops = 0, session = 1, port = 0, move = 0, opt, rw, ro, p[2], i;
	long more = 0, k;
	pthread_t tid;
	const char *name = NULL;
	size_t len = 64 * 1024;
	char lines[256], child[128];
	void *m;
	ssize_t n;

	while ((opt = getopt(argc, argv, "c:gHm:Nn:p:stu")) != -1) {
		switch (opt) {
		case 'c': port = atoi(optarg); break;
		case 'N': move = 1; break;
		case 's': session = 0; break;
		case 'H': hops = 1; break;
		case 'u': ring = 1; break;
		case 'g': ghost = 1; break;
		case 'm': more = atol(optarg); break;
		case 'n': name = optarg; break;
		case 'p': procfd = atoi(optarg); break;
		case 't': threads = 1; break;
		default: fprintf(stderr, "usage: tenant [-g [-s] | -t | -u | -H] [-c PORT] [-m COUNT] [-n NAME] [-p PROCFD] NODE PIDFILE\n"); return 2;
		}
	}
	if (argc - optind != 2) {
		fprintf(stderr, "usage: tenant [-g [-s] | -t | -u | -H] [-c PORT] [-m COUNT] [-n NAME] [-p PROCFD] NODE PIDFILE\n");
		return 2;
	}
	if (ring)
		registered(argv[optind], argv[optind + 1]);
	if (hops)
		hopper(argv[optind], argv[optind + 1]);
	rw = open(argv[optind], O_RDWR);
	if (rw < 0)
		die(argv[optind]);
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0);
	if (m == MAP_FAILED)
		die("mmap");
	ro = open(argv[optind], O_RDONLY);
	if (ro < 0)
		die(argv[optind]);
	for (k = 0; k < more; k++)
		if (mmap(NULL, 4096, PROT_READ, MAP_SHARED, ro, 0) == MAP_FAILED)
			die("mmap -m");
	if (port)
		connectself(port);
	if (move && unshare(CLONE_NEWNET) != 0)
		die("unshare CLONE_NEWNET");
	snprintf(lines, sizeof lines, "tenant %ld %ld %llu\n", hostpid(), (long)getpid(), starttime());
	if (!ghost) {
		if (name && prctl(PR_SET_NAME, name, 0, 0, 0) != 0)
			die("prctl PR_SET_NAME");
		if (procfd >= 0)
			close(procfd);
		writepids(argv[optind + 1], lines);
		if (threads) {
			for (i = 0; i < 3; i++)
				if ((errno = pthread_create(&tid, NULL, sleeper, NULL)) != 0)
					die("pthread_create");
			pthread_exit(NULL);
		}
		for (;;)
			pause();
	}
	if (pipe(p) != 0)
		die("pipe");
	switch (fork()) {
	case -1:
		die("fork");
	case 0:
		close(p[0]);
		if (session && setsid() < 0)
			die("setsid");
		if (name && prctl(PR_SET_NAME, name, 0, 0, 0) != 0)
			die("prctl PR_SET_NAME");
		n = snprintf(child, sizeof child, "ghost %ld %ld %llu\n", hostpid(), (long)getpid(), starttime());
		/* the ghost keeps the device, not a handle on the host's /proc */
		if (procfd >= 0)
			close(procfd);
		if (write(p[1], child, n) != n)
			die("write pipe");
		close(p[1]);
		for (;;)
			pause();
	}
	close(p[1]);
	n = read(p[0], child, sizeof child - 1);
	if (n <= 0)
		die("read pipe");
	child[n] = 0;
	strncat(lines, child, sizeof lines - strlen(lines) - 1);
	writepids(argv[optind + 1], lines);
	return 0;
}
