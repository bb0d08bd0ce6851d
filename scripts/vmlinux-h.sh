#!/usr/bin/env bash
# Regenerate bpf/c/vmlinux.h from this machine's kernel BTF, with a first line
# naming the kernel it came from (the objects are CO-RE: any kernel with BTF
# will do, but a regeneration must say which one it used).
set -euo pipefail
cd "$(dirname "$0")/.."
out=bpf/c/vmlinux.h
{
  echo "/* vmlinux.h: bpftool btf dump file /sys/kernel/btf/vmlinux format c, of Linux $(uname -r) $(uname -m) ($(bpftool version | head -1 | cut -d' ' -f2-)); scripts/vmlinux-h.sh regenerates it. */"
  bpftool btf dump file /sys/kernel/btf/vmlinux format c
} >"$out.tmp"
mv "$out.tmp" "$out"
echo "$out: $(head -1 "$out")"
