/*
 * libnvidia-ml.so.1 of a hung driver, for gpusnap's live tests: go-nvml
 * dlopens it by that name (LD_LIBRARY_PATH finds it first) and its
 * nvmlInit_v2 never returns, as a driver stuck in the kernel does not.
 */
#include <unistd.h>

int nvmlInit_v2(void) {
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
