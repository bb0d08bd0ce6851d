#!/usr/bin/env bash
# bench/watch.sh: what does gpusnap watch cost, and does it keep up?
#
# As root, on this host, with N extra `sleep` processes (default 500):
#   idle      CPU time (user+system, from /proc/PID/stat) of `gpusnap watch` over
#             IDLE seconds (60), in the BPF mode this kernel allows and in the fallback
#   loop      an open/close loop on a regular file (not a device), timed without a
#             watch and with one, alternated ROUNDS times (3): the ratio of speeds
#   rate      RATE opens a second (10000) of a loop-device node named nvidia0 for
#             SECONDS (5), paced, beside FLOOD (100000) opens of it as fast as one
#             process makes them, with the watch on: opens recorded against opens
#             made, events the kernel dropped, and the watch's CPU meanwhile
# Ratios within one run: the host is shared and noisy. Needs gcc, losetup, python3, root.
# PARTS="idle loop rate" (the default) chooses what to run. Each figure is also
# printed as a line "metric NAME VALUE", which bench/all.sh reads.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

N=${N:-500} IDLE=${IDLE:-60} ROUNDS=${ROUNDS:-3} RATE=${RATE:-10000} SECONDS_=${SECONDS_:-5}
LOOPS=${LOOPS:-200000} FLOOD=${FLOOD:-100000} PARTS=${PARTS:-idle loop rate}
require_tools go gcc losetup python3
[[ $(id -u) == 0 ]] || { echo "bench/watch.sh: needs root (BPF)" >&2; exit 2; }

go build -o "$work/gpusnap" ./cmd/gpusnap
gcc -O2 -Wall -o "$work/watchload" bench/watchload/watchload.c
truncate -s 1M "$work/gpu.img"
loopdev=$(losetup -f --show "$work/gpu.img")
mkdir "$work/dev"
mknod "$work/dev/nvidia0" b "$((0x$(stat -c '%t' "$loopdev")))" "$((0x$(stat -c '%T' "$loopdev")))"
echo x > "$work/plain"
watch_pid=
stop_watch() {
	if [[ -n "$watch_pid" ]]; then
		kill -TERM "$watch_pid" 2>/dev/null || true
		wait "$watch_pid" 2>/dev/null || true
		watch_pid=
	fi
}
trap 'stop_watch; losetup -d "$loopdev" 2>/dev/null || true; bench_cleanup' EXIT

# start_watch DB MODE: starts a watch and waits until it records.
start_watch() {
	"$work/gpusnap" watch --no-nvml --db "$1" --mode "$2" 2>"$1.log" &
	watch_pid=$!
	for _ in $(seq 600); do
		grep -q "recording into" "$1.log" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "watch did not start: $(cat "$1.log")" >&2
	exit 1
}
cpu_ticks() { awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$1/stat"; }

start_sleepers "$N"
echo "processes on the host: $(ls -d /proc/[0-9]* | wc -l)"

for mode in bpf fallback; do
	[[ " $PARTS " == *" idle "* ]] || break
	start_watch "$work/idle-$mode.db" "$mode"
	sleep 2 # past the start-up
	c0=$(cpu_ticks "$watch_pid")
	sleep "$IDLE"
	c1=$(cpu_ticks "$watch_pid")
	echo "metric idle-$mode-pct $(awk -v t=$((c1 - c0)) -v s="$IDLE" 'BEGIN{printf "%.2f", t/s}')"
	echo "idle $mode: $((c1 - c0)) ticks of CPU in ${IDLE}s = $(awk -v t=$((c1 - c0)) -v s="$IDLE" 'BEGIN{printf "%.2f", t/s}')% of one core ($(grep 'in .* mode' "$work/idle-$mode.db.log" | sed 's/.* in //'))"
	stop_watch
done

without=() with=()
[[ " $PARTS " == *" loop "* ]] || ROUNDS=0
for r in $(seq "$ROUNDS"); do
	without+=("$("$work/watchload" loop "$work/plain" "$LOOPS")")
	start_watch "$work/loop.db" bpf
	with+=("$("$work/watchload" loop "$work/plain" "$LOOPS")")
	stop_watch
done
((ROUNDS)) && echo "open/close of a regular file, ns per loop, without watch: ${without[*]}; with: ${with[*]}"
((ROUNDS)) && awk -v a="${without[*]}" -v b="${with[*]}" 'BEGIN{n=split(a,x," ");split(b,y," ");for(i=1;i<=n;i++){sa+=x[i];sb+=y[i]};printf "speed with watch / without: %.3fx\nmetric loop-ratio %.3f\n", sa/sb, sa/sb}'

[[ " $PARTS " == *" rate "* ]] || exit 0
start_watch "$work/rate.db" bpf
c0=$(cpu_ticks "$watch_pid") t0=$(date +%s.%N)
"$work/watchload" loop "$work/dev/nvidia0" "$FLOOD" >/dev/null &
flood_pid=$!
made=$("$work/watchload" rate "$work/dev/nvidia0" "$RATE" "$SECONDS_")
wait "$flood_pid"
made=$((made + FLOOD))
sleep 1.5
c1=$(cpu_ticks "$watch_pid") t1=$(date +%s.%N)
stop_watch
# A record of repeated opens stands for count of them; only watchload's are
# counted: other processes of a shared host may open nvidia-named nodes too.
recorded=$("$work/gpusnap" events --db "$work/rate.db" --json 2>/dev/null | python3 -c '
import json, sys
print(sum(max(e.get("count", 0), 1) for e in json.load(sys.stdin)
          if e.get("kind") == "open" and e.get("process", {}).get("comm") == "watchload"))')
lost=$(sed -n 's/.*stopped: .* events recorded, \([0-9]*\) lost.*/\1/p' "$work/rate.db.log")
cpu=$(awk -v t=$((c1 - c0)) -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", t/(b-a)}')
echo "metric rate-made $made"
echo "metric rate-recorded $recorded"
[[ -z "$lost" ]] || echo "metric rate-lost $lost"
echo "metric rate-cpu-pct $cpu"
echo "rate: $made opens of nvidia0 ($((made - FLOOD)) at ${RATE}/s, $FLOOD unpaced), $recorded recorded, ${lost:-unknown} lost; watch's CPU meanwhile $cpu% of one core; $(grep 'stopped' "$work/rate.db.log")"
