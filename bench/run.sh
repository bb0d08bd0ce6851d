#!/usr/bin/env bash
# bench/run.sh: how fast is `gpusnap snapshot` on a busy host?
#
# Starts N extra `sleep` processes (default 500), then in ONE hyperfine run
# times, on the same host state:
#   snapshot  gpusnap snapshot --json --no-nvml [--no-store] >/dev/null: the BPF
#             path where the kernel loads it (its iterators pinned in
#             /sys/fs/bpf/gpusnap; the script mounts a BPF filesystem there for
#             the run where none is, as systemd does, and unmounts it after)
#   proc      the same with --capture proc: the /proc path
#   floor     bench/floor/rawfloor: one thread reading every /proc/PID/maps and
#             readlinking every /proc/PID/fd/N, parsing nothing (the kernel's cost)
#   fuser     fuser -v over the device nodes an operator would name (see below)
#   lsof      lsof over the same nodes
# and prints the ratios snapshot/floor (target <= 1.0) and snapshot/fuser
# (target <= 0.5). Ratios, not times: these machines are shared and noisy.
#
# It installs nothing: it needs go, hyperfine (Debian package) and fuser
# (psmisc). It kills exactly the sleeps it started, by PID, on any exit.
#
# Environment: N (extra processes, 500), RUNS (timed runs per command, 30),
# FUSER_NODES (space-separated device nodes for fuser; default /dev/nvidia*,
# or, on a host without them, six busy character devices: see below), EXPORT
# (a file for hyperfine's JSON, which bench/all.sh reads).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

N=${N:-500}
RUNS=${RUNS:-30}
require_tools go hyperfine fuser lsof /usr/bin/time

go build -o "$work/gpusnap" ./cmd/gpusnap
go build -o "$work/rawfloor" ./bench/floor/rawfloor

# The store is not what is measured: --no-store where this gpusnap has it, and
# a throwaway --db either way so nothing lands in /var/lib/gpusnap.
snap="$work/gpusnap snapshot --json --no-nvml --db $work/bench.db"
help=$("$work/gpusnap" snapshot --help 2>&1) # not piped into grep -q: pipefail and SIGPIPE
if [[ "$help" == *--no-store* ]]; then
	snap="$snap --no-store"
else
	echo "note: this gpusnap has no --no-store (no store yet): snapshot only prints"
fi

# fuser's nodes. On a GPU host: /dev/nvidia*, the operator's own command. On a
# host without them, six character devices that many processes hold open, as
# many as a 4-GPU host's nvidia0-3, nvidiactl and nvidia-uvm: fuser's cost is
# one pass over every process's fds and maps, whatever the names, and these
# give it real matches to report.
shopt -s nullglob
if [[ -n "${FUSER_NODES:-}" ]]; then
	read -r -a nodes <<<"$FUSER_NODES"
else
	nodes=(/dev/nvidia*)
	((${#nodes[@]})) || nodes=(/dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty)
fi
shopt -u nullglob

start_sleepers "$N"

# The BPF path reads its iterators from pins where a BPF filesystem is mounted
# at /sys/fs/bpf (systemd mounts one); mount one for the run where none is.
if [[ "$(stat -f -c %T /sys/fs/bpf 2>/dev/null)" != bpf_fs ]] && mount -t bpf bpf /sys/fs/bpf 2>/dev/null; then
	bench_unmount=/sys/fs/bpf
fi

# Each command must work before it is timed: hyperfine -i below only forgives
# fuser's exit status 1 (no process uses the nodes).
$snap >"$work/snap.json" 2>"$work/capture.txt"
# The /proc path's peak RSS (GNU time's %M, KiB): what a capture of this
# host holds at once.
/usr/bin/time -f %M -o "$work/rss.txt" $snap --capture proc >/dev/null 2>&1
"$work/rawfloor" 2>"$work/floor.txt"
procs=$(ls /proc | grep -c '^[0-9]')
echo "host: $(uname -r), $(nproc) CPUs, $procs processes ($N sleeps added), hyperfine $(hyperfine --version | cut -d' ' -f2)"
echo "metric procs $procs"
echo "metric proc-rss-MiB $(awk '{ printf "%.1f", $1 / 1024 }' "$work/rss.txt")"
echo "floor: $(cat "$work/floor.txt")"
echo "fuser -v ${nodes[*]}; lsof ${nodes[*]}"
echo "snapshot: $(cat "$work/capture.txt")"
echo

in_background hyperfine -N -i --warmup 3 --runs "$RUNS" --export-csv "$work/times.csv" ${EXPORT:+--export-json "$EXPORT"} \
	-n snapshot "$snap" \
	-n proc "$snap --capture proc" \
	-n floor "$work/rawfloor" \
	-n fuser "fuser -v ${nodes[*]}" \
	-n lsof "lsof ${nodes[*]}"

# times.csv: command,mean,stddev,median,user,system,min,max (seconds)
# The targets are wall-clock ratios. The CPU ratio (user+system) is the work
# each does: a capture parallel over P CPUs cannot get below (cpu ratio)/P.
awk -F, -v cpus="$(nproc)" '
	NR > 1 { mean[$1] = $2; median[$1] = $4; cpu[$1] = $5 + $6 }
	END {
		printf "\nratios          wall (mean; median)   cpu (user+sys)\n"
		split("snapshot proc", a, " ")
		split("floor fuser lsof", b, " ")
		for (i = 1; i <= 2; i++) for (j = 1; j <= 3; j++)
			printf "  %-8s/%-6s %.2fx; %.2fx        %.2fx\n", a[i], b[j], mean[a[i]] / mean[b[j]], median[a[i]] / median[b[j]], cpu[a[i]] / cpu[b[j]]
		printf "  snapshot/proc   %.2fx; %.2fx        %.2fx\n", mean["snapshot"] / mean["proc"], median["snapshot"] / median["proc"], cpu["snapshot"] / cpu["proc"]
		printf "(%d CPUs; snapshot takes the BPF path where it can, proc the /proc path)\n", cpus
	}' "$work/times.csv"
