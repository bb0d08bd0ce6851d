// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// gpusnap.h: what watch.c and iter.c share: the kernel's types and libbpf's
// helpers (both vendored here, so a build does not depend on the host's),
// the license, and the kernel's constants that vmlinux.h lacks (they are
// macros, which BTF does not carry).

#ifndef GPUSNAP_H
#define GPUSNAP_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define S_IFMT 00170000
#define S_IFCHR 0020000
#define S_IFBLK 0060000
#define O_CLOEXEC 02000000
#define O_PATH 010000000
#define MAP_ANONYMOUS 0x20

// is_device says whether an inode's mode is a character or block device's.
static __always_inline int is_device(u32 mode)
{
	u32 type = mode & S_IFMT;
	return type == S_IFCHR || type == S_IFBLK;
}

#endif
