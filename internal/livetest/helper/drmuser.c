// drmuser: a real DRM client for a guest with vgem loaded. `drmuser ghost
// CARD RENDER` opens both nodes, makes a 1 MiB dumb buffer on the primary
// node (vgem allows it there, not on a render node), shares it with the
// render node through PRIME and maps it through the render node, writes to
// it, then forks a child into its own session and exits: the child, a
// ghost, keeps both descriptors and the mapping until killed. `drmuser hold
// RENDER` holds the render node and nothing else, as a compositor does.
// Each prints the PID that keeps the node on stdout, then waits.
#include <fcntl.h>
#include <linux/ioctl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

// The uapi structs of include/uapi/drm/drm_mode.h and drm.h, written out:
// no libdrm headers are needed to build this.
struct create_dumb { uint32_t height, width, bpp, flags, handle, pitch; uint64_t size; };
struct map_dumb { uint32_t handle, pad; uint64_t offset; };
struct prime_handle { uint32_t handle, flags; int32_t fd; };

#define DRM_BASE 'd'
#define IOCTL_CREATE_DUMB _IOWR(DRM_BASE, 0xB2, struct create_dumb)
#define IOCTL_MAP_DUMB _IOWR(DRM_BASE, 0xB3, struct map_dumb)
#define IOCTL_HANDLE_TO_FD _IOWR(DRM_BASE, 0x2d, struct prime_handle)
#define IOCTL_FD_TO_HANDLE _IOWR(DRM_BASE, 0x2e, struct prime_handle)
#define PRIME_RDWR 02 /* DRM_RDWR is O_RDWR */

static int fail(const char *what) { perror(what); return 1; }

static int ghost(const char *card, const char *render) {
	int cfd = open(card, O_RDWR | O_CLOEXEC), rfd = open(render, O_RDWR | O_CLOEXEC);
	if (cfd < 0 || rfd < 0) return fail("open");
	struct create_dumb c = { .height = 256, .width = 1024, .bpp = 32 };
	if (ioctl(cfd, IOCTL_CREATE_DUMB, &c)) return fail("create dumb");
	struct map_dumb m = { .handle = c.handle };
	if (ioctl(cfd, IOCTL_MAP_DUMB, &m)) return fail("map dumb");
	struct prime_handle out = { .handle = c.handle, .flags = O_CLOEXEC | PRIME_RDWR, .fd = -1 };
	if (ioctl(cfd, IOCTL_HANDLE_TO_FD, &out)) return fail("prime export");
	struct prime_handle in = { .fd = out.fd };
	if (ioctl(rfd, IOCTL_FD_TO_HANDLE, &in)) return fail("prime import");
	close(out.fd);
	char *p = mmap(NULL, c.size, PROT_READ | PROT_WRITE, MAP_SHARED, rfd, m.offset);
	if (p == MAP_FAILED) return fail("mmap render");
	memset(p, 0x5a, c.size);
	pid_t child = fork();
	if (child < 0) return fail("fork");
	if (child > 0) {
		printf("%d\n", child);
		fflush(stdout);
		return 0; // the parent leaves: its child is the ghost
	}
	setsid();
	close(STDOUT_FILENO);
	for (;;) pause();
}

static int hold(const char *render) {
	int fd = open(render, O_RDWR | O_CLOEXEC);
	if (fd < 0) return fail("open");
	printf("%d\n", getpid());
	fflush(stdout);
	close(STDOUT_FILENO);
	for (;;) pause();
}

int main(int argc, char **argv) {
	if (argc == 4 && strcmp(argv[1], "ghost") == 0) return ghost(argv[2], argv[3]);
	if (argc == 3 && strcmp(argv[1], "hold") == 0) return hold(argv[2]);
	fprintf(stderr, "usage: drmuser ghost CARD RENDER | drmuser hold RENDER\n");
	return 2;
}
