// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// floor.c: empty programs on each attach point of watch.c's hooks. The
// tests attach one hook's set to measure what the kernel charges an open and
// close for running a program there at all (the syscall slow path, the
// dispatch), apart from what watch.c's programs then do.

#include "gpusnap.h"

SEC("tp_btf/sys_exit")
int BPF_PROG(floor_raw_exit) { return 0; }

SEC("tracepoint/syscalls/sys_exit_openat")
int floor_tp_exit_openat(void *ctx) { return 0; }

SEC("tracepoint/syscalls/sys_enter_mmap")
int floor_tp_enter_mmap(void *ctx) { return 0; }

SEC("kprobe/security_file_open")
int floor_kprobe_file_open(void *ctx) { return 0; }

SEC("kprobe/security_mmap_file")
int floor_kprobe_mmap_file(void *ctx) { return 0; }

SEC("fentry/security_file_open")
int BPF_PROG(floor_fentry_file_open) { return 0; }

SEC("fentry/security_mmap_file")
int BPF_PROG(floor_fentry_mmap_file) { return 0; }

SEC("lsm/file_open")
int BPF_PROG(floor_lsm_file_open) { return 0; }

SEC("lsm/mmap_file")
int BPF_PROG(floor_lsm_mmap_file) { return 0; }
