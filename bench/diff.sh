#!/usr/bin/env bash
# bench/diff.sh: what does `gpusnap diff --tenant T` cost over a bare snapshot?
#
# Starts N extra `sleep` processes (default 500), takes a baseline of tenant
# "bench" in a throwaway store, then in ONE hyperfine run times, on the same
# host state and the same store:
#   snapshot  gpusnap snapshot --no-nvml            (capture and store)
#   diff      gpusnap diff --tenant bench --no-nvml (capture, store, load the baseline, compare, report)
# and prints the ratio diff/snapshot (target <= 1.5). Ratios, not times: these
# machines are shared and noisy.
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

$g baseline --tenant bench >/dev/null
# The diff must run clean before it is timed; -i below forgives exit 1, which
# other processes of this shared host may cause by changing meanwhile.
$g diff --tenant bench >"$work/diff.txt" || [[ $? == 1 ]]
procs=$(ls /proc | grep -c '^[0-9]')
echo "host: $(uname -r), $(nproc) CPUs, $procs processes ($N sleeps added), hyperfine $(hyperfine --version | cut -d' ' -f2)"
head -1 "$work/diff.txt"
echo

in_background hyperfine -N -i --warmup 3 --runs "$RUNS" --export-csv "$work/times.csv" ${EXPORT:+--export-json "$EXPORT"} \
	-n snapshot "$g snapshot" \
	-n diff "$g diff --tenant bench"

# times.csv: command,mean,stddev,median,user,system,min,max (seconds)
awk -F, '
	NR > 1 { mean[$1] = $2; median[$1] = $4 }
	END {
		printf "\nratio (mean; median)\n"
		printf "  diff/snapshot  %.2fx; %.2fx   target <= 1.50x\n", mean["diff"] / mean["snapshot"], median["diff"] / median["snapshot"]
	}' "$work/times.csv"
