#!/usr/bin/env bash
# bench/hostile.sh: what a hostile tenant's processes cost a snapshot.
#
# As root, on a loop device reached through a node named nvidia0:
#   maps  one process maps the node 100,000 times (vm.max_map_count raised to
#         200,000 for the run, restored on exit); `gpusnap snapshot --json` by
#         each capture path (bpf: the BPF path, its iterators pinned on a
#         BPF filesystem the script mounts at /sys/fs/bpf in a mount
#         namespace of its own; proc: --capture proc) against the raw floor (every maps
#         file read, every fd link read, no parsing) in ONE hyperfine run:
#         wall and CPU (user+system) ratios, and each path's peak RSS
#         (target: <= 2x the floor, <= 64 MiB); and what the tenant alone
#         costs each command: its CPU with the tenant less its CPU on the
#         same host without it (measured first), against the floor's.
#   argv  one process with 5.5 MB of arguments forks 100 children sharing
#         them; the same timings, the peak RSS, the snapshot's JSON size and
#         what a stored snapshot adds to the store (docs/spec.md's limits:
#         256 MiB of memory, 64 KiB of new store data per process).
# It kills exactly the processes it started, by PID, detaches its loop
# device and restores vm.max_map_count on any exit.
#
# Environment: RUNS (timed runs per command, 10), COUNT (mappings, 100000),
# CHILDREN (100). Each figure is also printed as a line "metric NAME VALUE",
# which bench/all.sh reads.
set -euo pipefail
if [[ -z "${HOSTILE_MOUNT_NS:-}" && $EUID -eq 0 ]]; then
	# A private mount namespace for its BPF filesystem, gone when it ends.
	HOSTILE_MOUNT_NS=1 exec unshare --mount --propagation private "$0" "$@"
fi
cd "$(dirname "$0")/.."
source bench/lib.sh

RUNS=${RUNS:-10}
COUNT=${COUNT:-100000}
CHILDREN=${CHILDREN:-100}
require_tools go hyperfine gcc losetup
if ((EUID != 0)); then
	echo "$(basename "$0"): needs root (a loop device, vm.max_map_count)" >&2
	exit 2
fi

tenants=()
loop=
maxmap=$(sysctl -n vm.max_map_count)
hostile_cleanup() {
	if ((${#tenants[@]})); then
		kill -9 "${tenants[@]}" 2>/dev/null || true
	fi
	[[ -n "$loop" ]] && losetup -d "$loop"
	sysctl -qw vm.max_map_count="$maxmap"
	bench_cleanup
}
trap hostile_cleanup EXIT

go build -o "$work/gpusnap" ./cmd/gpusnap
go build -o "$work/rawfloor" ./bench/floor/rawfloor
gcc -O -Wall -o "$work/tenant" bench/hostile/tenant.c

truncate -s 1M "$work/img"
loop=$(losetup -f --show "$work/img")
mkdir "$work/dev"
# The BPF path reads its iterators from pins where a BPF filesystem is mounted
# at /sys/fs/bpf (systemd mounts one); the script mounts its own there, in a
# mount namespace of its own (see the top), so no other run's pins count.
mount -t bpf bpf /sys/fs/bpf

mknod "$work/dev/nvidia0" b "$(stat -c '%t' "$loop" | xargs printf '%d')" "$(stat -c '%T' "$loop" | xargs printf '%d')"

# start_tenant ARGS... starts the tenant helper and waits for its PID file.
start_tenant() {
	rm -f "$work/pids"
	"$work/tenant" "$@" "$work/pids" &
	local i
	for ((i = 0; i < 600; i++)); do
		[[ -f "$work/pids" ]] && break
		sleep 0.1
	done
	mapfile -t -O "${#tenants[@]}" tenants <"$work/pids"
}

stop_tenants() {
	kill -9 "${tenants[@]}" 2>/dev/null || true
	wait 2>/dev/null || true
	tenants=()
}

snap="$work/gpusnap snapshot --json --no-nvml --no-store --db $work/bench.db"

# measure NAME: one hyperfine run of both capture paths and the floor, then
# the ratios, each path's peak RSS and the output's size.
measure() {
	$snap --capture bpf >/dev/null 2>"$work/capture.txt" # loads and pins the iterators
	echo "$1: $(grep '^capture:' "$work/capture.txt")"
	in_background hyperfine -N --warmup 2 --runs "$RUNS" --export-csv "$work/$1.csv" \
		-n bpf "$snap --capture bpf" -n proc "$snap --capture proc" -n floor "$work/rawfloor"
	local path
	for path in bpf proc; do
		/usr/bin/time -f '%M' -o "$work/rss-$path" $snap --capture $path >"$work/snap-$path.json" 2>/dev/null
	done
	awk -F, -v rssbpf="$(cat "$work/rss-bpf")" -v rssproc="$(cat "$work/rss-proc")" \
		-v json="$(stat -c %s "$work/snap-bpf.json")" -v what="$1" '
		NR > 1 { mean[$1] = $2; cpu[$1] = $5 + $6 }
		END {
			rss["bpf"] = rssbpf; rss["proc"] = rssproc
			printf "%s: floor %.1f ms wall, %.1f ms CPU\n", what, 1000 * mean["floor"], 1000 * cpu["floor"]
			for (p in rss)
				printf "%s: %s path %.1f ms wall, %.1f ms CPU: %.2fx the floor wall, %.2fx CPU; peak RSS %.1f MiB\n", what, p,
					1000 * mean[p], 1000 * cpu[p], mean[p] / mean["floor"], cpu[p] / cpu["floor"], rss[p] / 1024
			printf "%s: JSON %.1f KiB\n", what, json / 1024
			printf "metric %s-floor-cpu-ms %.2f\n", what, 1000 * cpu["floor"]
			for (p in rss) {
				printf "metric %s-%s-cpu-ms %.2f\nmetric %s-%s/floor-cpu %.3f\n", what, p, 1000 * cpu[p], what, p, cpu[p] / cpu["floor"]
				printf "metric %s-%s/floor-wall %.3f\nmetric %s-%s-rss-MiB %.1f\n", what, p, mean[p] / mean["floor"], what, p, rss[p] / 1024
			}
		}' "$work/$1.csv"
}

# tenant_cost NAME: what the tenant of NAME adds to each command's CPU (the
# run of NAME less the run of the host without it), against the floor's.
tenant_cost() {
	awk -F, -v what="$1" '
		FNR > 1 { cpu[FILENAME == ARGV[1] ? "host" : "tenant", $1] = $5 + $6 }
		END {
			floor = cpu["tenant", "floor"] - cpu["host", "floor"]
			printf "%s: the tenant alone costs the floor %.1f ms CPU\n", what, 1000 * floor
			split("bpf proc", paths, " ")
			for (i = 1; i <= 2; i++) {
				p = paths[i]; c = cpu["tenant", p] - cpu["host", p]
				printf "%s: the tenant alone costs the %s path %.1f ms CPU: %.2fx the floor\n", what, p, 1000 * c, c / floor
			}
		}' "$work/host.csv" "$work/$1.csv"
}

procs=$(ls /proc | grep -c '^[0-9]')
echo "host: $(uname -r), $(nproc) CPUs, $procs processes, hyperfine $(hyperfine --version | cut -d' ' -f2)"
measure host

sysctl -qw vm.max_map_count=$((COUNT * 2))
start_tenant maps "$work/dev/nvidia0" "$COUNT"
echo "maps: PID ${tenants[0]} maps $work/dev/nvidia0 $(grep -c nvidia0 "/proc/${tenants[0]}/maps") times"
measure maps
tenant_cost maps
stop_tenants

start_tenant argv "$CHILDREN"
echo "argv: $((${#tenants[@]})) processes with $(wc -c <"/proc/${tenants[0]}/cmdline") bytes of arguments each"
measure argv
tenant_cost argv
# What a stored snapshot of them adds: the store after one snapshot, less
# the store after one without them.
$work/gpusnap snapshot --no-nvml --db "$work/with.db" >/dev/null
stop_tenants
$work/gpusnap snapshot --no-nvml --db "$work/without.db" >/dev/null
echo "argv: store $(stat -c %s "$work/with.db") bytes with them, $(stat -c %s "$work/without.db") without"
