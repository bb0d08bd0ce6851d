/*
 * libnvidia-ml.so.1 of a hung driver, for gpusnap's live tests: go-nvml
 * dlopens it by that name (LD_LIBRARY_PATH finds it first) and its
 * nvmlInit_v2 never returns, as a driver stuck in the kernel does not.
 * Where GPUSNAP_NVML_HANG_ENTERED names a file, it makes that file first:
 * a test's signal that the caller is now stuck in the library.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

int nvmlInit_v2(void) {
	const char *entered = getenv("GPUSNAP_NVML_HANG_ENTERED");
	if (entered != NULL) {
		int fd = open(entered, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		if (fd >= 0)
			close(fd);
	}
	for (;;)
		pause();
	return 0;
}

int nvmlInit(void) { return nvmlInit_v2(); }

int nvmlInitWithFlags(unsigned int flags) {
	(void)flags;
	return nvmlInit_v2();
}

int nvmlShutdown(void) { return 0; }

const char *nvmlErrorString(int ret) {
	(void)ret;
	return "hung";
}
