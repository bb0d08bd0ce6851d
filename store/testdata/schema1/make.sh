#!/usr/bin/env bash
# Makes store.bolt, a store of schema 1, with the gpusnap of commit bfa0153 (the
# last to write schema 1), and checkpoint.txt, its signed checkpoint:
#   GPUSNAP_OLD=/path/to/that/gpusnap store/testdata/schema1/make.sh
# It holds a snapshot, a tenant's baseline and the post capture of its diff
# (a result leaf), a second snapshot of an unchanged host (records shared),
# and one removed (a remove leaf). One process has 400 NVIDIA mappings (a
# record past 16 KiB, stored compressed) and invalid UTF-8 in its command
# line (JSON writes it as \ufffd). TestSchema1Store reads it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
old=${GPUSNAP_OLD:?the schema-1 gpusnap binary}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cp -r "$repo/fixtures/proc/gpuhost" "$work/root"
for i in $(seq 0 399); do
	printf '7f20%08x000-7f20%08x800 rw-s 00000000 00:05 1043                       /dev/nvidia0\n' "$i" "$i"
done >>"$work/root/4242/maps"
printf 'python3\0train.py\0--name\0caf\xe9\0' >"$work/root/4242/cmdline"

scen="$work/scenario"
(cd "$repo" && go run ./fixtures/scenariotool materialize cuda-ghost-keeps-context "$scen")
rm -f "$here/store.bolt" "$here/checkpoint.txt"
g() { "$old" --db "$here/store.bolt" --lock-timeout 5s "$@"; }
g snapshot --proc-root "$work/root" --nvml-fixture "$repo/fixtures/nvml/h100x8.json" >/dev/null
g baseline --tenant job-7 --proc-root "$scen/before/proc" --nvml-fixture "$scen/before/nvml.json" >/dev/null
g diff --tenant job-7 --proc-root "$scen/after/proc" --nvml-fixture "$scen/after/nvml.json" >/dev/null || test $? = 1
g snapshot --label again --proc-root "$work/root" --nvml-fixture "$repo/fixtures/nvml/h100x8.json" >/dev/null
gone=$(g snapshot --label gone --proc-root "$repo/fixtures/proc/gpuhost" --no-nvml | tail -1)
g rm "$gone" >/dev/null
"$old" keygen -o "$work/key" >/dev/null
g store checkpoint --sign-key "$work/key.key" >"$here/checkpoint.txt"
cp "$work/key.pub" "$here/checkpoint.pub"
