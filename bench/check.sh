#!/usr/bin/env bash
# bench/check.sh: does `gpusnap check` cost no more than one snapshot?
#
# Starts N extra `sleep` processes (default 500), then in ONE hyperfine run
# times, on the same host state:
#   snapshot   gpusnap snapshot --no-nvml            (capture and store)
#   nostore    gpusnap snapshot --no-nvml --no-store (capture only; prints the id)
#   check      gpusnap check --no-nvml               (capture, compare against nothing, report)
# and prints the ratios check/snapshot (target <= 1.0) and check/nostore,
# wall and CPU (user+system). Ratios, not times: these machines are shared.
#
# It installs nothing: it needs go and hyperfine (Debian package). It kills
# exactly the sleeps it started, by PID, on any exit.
#
# Environment: N (extra processes, 500), RUNS (timed runs per command, 30),
# EXPORT (a file for hyperfine's JSON, which bench/all.sh reads).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

N=${N:-500}
RUNS=${RUNS:-30}
require_tools go hyperfine

go build -o "$work/gpusnap" ./cmd/gpusnap
g="$work/gpusnap --no-nvml --db $work/bench.db"

start_sleepers "$N"
$g snapshot >/dev/null
procs=$(ls /proc | grep -c '^[0-9]')
echo "host: $(uname -r), $(nproc) CPUs, $procs processes ($N sleeps added), hyperfine $(hyperfine --version | cut -d' ' -f2)"
$g check | head -1 || true
echo

# -i: check exits 1 when another process of this shared host holds a GPU-like node.
in_background hyperfine -N -i --warmup 3 --runs "$RUNS" --export-csv "$work/times.csv" ${EXPORT:+--export-json "$EXPORT"} \
	-n snapshot "$g snapshot" \
	-n nostore "$g snapshot --no-store" \
	-n check "$g check"

# times.csv: command,mean,stddev,median,user,system,min,max (seconds)
awk -F, '
	NR > 1 { mean[$1] = $2; median[$1] = $4; cpu[$1] = $5 + $6 }
	END {
		printf "\nratio            mean   median  cpu (user+system)\n"
		printf "  check/snapshot %.2fx  %.2fx   %.2fx   target <= 1.00x\n", mean["check"] / mean["snapshot"], median["check"] / median["snapshot"], cpu["check"] / cpu["snapshot"]
		printf "  check/nostore  %.2fx  %.2fx   %.2fx\n", mean["check"] / mean["nostore"], median["check"] / median["nostore"], cpu["check"] / cpu["nostore"]
	}' "$work/times.csv"
