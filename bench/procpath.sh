#!/usr/bin/env bash
# bench/procpath.sh: the /proc capture path against the raw floor and the
# peer tools, and against the gpusnap it replaces, side by side in one run.
#
# For each host size in SIZES (total processes; sleeps are added up to it),
# ONE hyperfine run times on the same host state:
#   floor   bench/floor/rawfloor: one thread reading every /proc/PID/maps and
#           readlinking every /proc/PID/fd/N, parsing nothing
#   fuser   fuser -v over the device nodes an operator would name (run.sh)
#   lsof    lsof over the same nodes
#   before  gpusnap snapshot --json --no-nvml --no-store --capture proc, built
#           from BEFORE (a git revision, default main)
#   after   the same, built from the working tree
# and prints CPU (user+sys, hyperfine's means) beside wall (mean; median) for
# each, and the ratios to the floor, fuser and lsof, and after/before.
#
# Environment: SIZES (default "575 2000 5000"), RUNS (timed runs per command,
# 10), BEFORE (revision, main), FUSER_NODES (as in run.sh). Needs go,
# hyperfine, fuser, lsof, git; root, as production runs. It kills exactly the
# sleeps it started, by PID, on any exit.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

SIZES=${SIZES:-575 2000 5000}
RUNS=${RUNS:-10}
BEFORE=${BEFORE:-main}
require_tools go hyperfine fuser lsof git

go build -o "$work/after" ./cmd/gpusnap
go build -o "$work/rawfloor" ./bench/floor/rawfloor
mkdir "$work/src"
git archive "$BEFORE" | tar -x -C "$work/src"
(cd "$work/src" && go build -o "$work/before" ./cmd/gpusnap)

shopt -s nullglob
if [[ -n "${FUSER_NODES:-}" ]]; then
	read -r -a nodes <<<"$FUSER_NODES"
else
	nodes=(/dev/nvidia*)
	((${#nodes[@]})) || nodes=(/dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty)
fi
shopt -u nullglob

snap="snapshot --json --no-nvml --no-store --capture proc --db $work/bench.db"
echo "host: $(uname -r), $(nproc) CPUs, hyperfine $(hyperfine --version | cut -d' ' -f2), before: $BEFORE ($(git rev-parse --short "$BEFORE")), after: the working tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ', modified'))"
echo "date: $(date -u +%FT%TZ); fuser -v ${nodes[*]}; lsof ${nodes[*]}"

for size in $SIZES; do
	have=$(ls /proc | grep -c '^[0-9]')
	((size > have)) && start_sleepers $((size - have))
	"$work/after" $snap >/dev/null
	"$work/before" $snap >/dev/null
	echo
	echo "== $(ls /proc | grep -c '^[0-9]') processes (asked $size), load $(cut -d' ' -f1-3 /proc/loadavg)"
	in_background hyperfine -N -i --warmup 2 --runs "$RUNS" --style none --export-csv "$work/times.csv" \
		-n floor "$work/rawfloor" \
		-n fuser "fuser -v ${nodes[*]}" \
		-n lsof "lsof ${nodes[*]}" \
		-n before "$work/before $snap" \
		-n after "$work/after $snap" >/dev/null
	# times.csv: command,mean,stddev,median,user,system,min,max (seconds)
	awk -F, '
		NR > 1 { mean[$1] = $2; median[$1] = $4; cpu[$1] = $5 + $6 }
		END {
			printf "%-7s %9s %9s %9s\n", "", "cpu ms", "wall ms", "median"
			split("floor fuser lsof before after", c, " ")
			for (i = 1; i <= 5; i++) printf "%-7s %9.1f %9.1f %9.1f\n", c[i], cpu[c[i]] * 1e3, mean[c[i]] * 1e3, median[c[i]] * 1e3
			printf "ratios, cpu (wall mean)\n"
			split("before after", a, " ")
			split("floor fuser lsof", b, " ")
			for (i = 1; i <= 2; i++) for (j = 1; j <= 3; j++)
				printf "  %-6s/%-5s %.2fx (%.2fx)\n", a[i], b[j], cpu[a[i]] / cpu[b[j]], mean[a[i]] / mean[b[j]]
			printf "  after /before %.2fx (%.2fx)\n", cpu["after"] / cpu["before"], mean["after"] / mean["before"]
		}' "$work/times.csv"
done
