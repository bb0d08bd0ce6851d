package main

// One glibc malloc arena for the whole process, because glibc reserves 64 MiB
// of address space per thread calling malloc, and under an address-space
// limit (ulimit -v, LimitAS=) gpusnap died in pthread_create. It is set in a
// load-time constructor, since glibc fixes the limit at the first extra
// arena, which Go's runtime threads make before any Go init.

/*
#include <malloc.h>

static void __attribute__((constructor)) gpusnap_one_arena(void) { mallopt(M_ARENA_MAX, 1); }
*/
import "C"
