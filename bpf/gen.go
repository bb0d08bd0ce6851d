// Package bpf is gpusnap's home for eBPF programs: their C sources (c/), the
// Go bindings and objects bpf2go generated from them (committed, so building
// gpusnap needs no clang), and the loaders that attach them.
//
// Regenerate after editing c/ (Debian: apt-get install clang llvm libbpf-dev bpftool):
//
//	go generate ./bpf/
package bpf

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type event watch c/watch.c -- -I./c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type task_rec -type vma_rec -type file_rec iter c/iter.c -- -I./c
