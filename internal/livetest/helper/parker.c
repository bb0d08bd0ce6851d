/*
 * parker PATH: open PATH read-write, send the descriptor to itself
 * over a unix socket pair (SCM_RIGHTS) without receiving it, close its own
 * copy, say "parked" on stdout and sleep until killed. The open file now
 * lives only in the socket's receive queue: /proc/PID/fd and maps show no
 * device, and the process can take it back at any time.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void die(const char *what) {
	perror(what);
	exit(1);
}

int main(int argc, char **argv) {
	int sv[2], fd;
	char byte = 'x';
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
	struct cmsghdr *c;

	if (argc != 2) {
		fprintf(stderr, "usage: parker PATH\n");
		return 2;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		die("socketpair");
	fd = open(argv[1], O_RDWR);
	if (fd < 0)
		die(argv[1]);
	memset(u.buf, 0, sizeof(u.buf));
	c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	if (sendmsg(sv[0], &msg, 0) != 1)
		die("sendmsg");
	close(fd);
	printf("parked\n");
	fflush(stdout);
	for (;;)
		pause();
}
