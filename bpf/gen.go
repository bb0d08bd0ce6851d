// Package bpf holds gpusnap's eBPF programs: their C sources (c/), the Go
// bindings and objects bpf2go generates from them, and their loaders. The
// objects are committed, so building gpusnap needs no clang.
//
// After editing c/, regenerate with Debian 12's clang-14 and llvm-14
// (1:14.0.6-12). CI rebuilds the objects with them and fails on a difference:
//
//	go generate ./bpf/
package bpf

//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror -mcpu=v3 -D__TARGET_ARCH_x86" -target bpfel -type event -type event_kind -type path_limit -type proc_runs -type run_limit -type run_state watch c/watch.c -- -I./c -I./c/include
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror" -target bpfel -type task_rec -type vma_rec -type file_rec -type iter_limit -type rec_flag -type vma_kind iter c/iter.c -- -I./c -I./c/include
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror" -target bpfel floor c/floor.c -- -I./c -I./c/include
