package main

// One glibc malloc arena for the whole process. Go's heap does not use
// malloc; only libnvidia-ml and cgo do, a little. But glibc reserves 64 MiB
// of address space per thread that calls malloc (up to 8 per CPU), which
// under an address-space limit (ulimit -v, systemd's LimitAS=) made gpusnap
// die in pthread_create before reading anything. It is set in a constructor,
// at load: glibc fixes its arena limit at the first extra arena, which the Go
// runtime's threads make before any Go init runs. The test of hostile inputs
// runs every case under a 1 GiB limit.

/*
#include <malloc.h>

static void __attribute__((constructor)) gpusnap_one_arena(void) { mallopt(M_ARENA_MAX, 1); }
*/
import "C"
