#!/usr/bin/env bash
# bench/codec.sh: what does `gpusnap diff A B` of two stored snapshots cost
# against `gpusnap show A`, with the store's binary process records (schema
# 2) and with the JSON records of the gpusnap before them (schema 1)?
#
# Starts N extra `sleep` processes (default 5000), builds this tree's gpusnap
# and that of OLD_REV (default bfa0153, the last to write schema 1), lets
# each store two snapshots of the host in its own store, then in ONE
# hyperfine run times, on the same host state:
#   show       gpusnap show A                 (the summary: decodes the GPU users)
#   show-json  gpusnap show --json A          (the whole snapshot, as stored)
#   diff       gpusnap diff A B               (loads both, compares, appends its result leaf)
# for both binaries on their own stores, and prints each one's wall and CPU
# (user+sys) time and the ratios: diff/show for each (target <= 3x for this
# tree), and this tree's against the old one's.
#
# It needs go, git and hyperfine (Debian package); it kills exactly the
# sleeps it started, by PID, on any exit.
#
# Environment: N (extra processes, 5000), RUNS (timed runs per command, 20),
# OLD_REV (the schema 1 commit; none times this tree alone), EXPORT (a file
# for hyperfine's JSON, which bench/all.sh reads).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

N=${N:-5000}
RUNS=${RUNS:-20}
OLD_REV=${OLD_REV:-bfa0153}
require_tools go git hyperfine

go build -o "$work/new" ./cmd/gpusnap
versions=(new)
if [[ "$OLD_REV" != none ]]; then
	versions+=(old)
	mkdir "$work/old-src"
	git archive "$OLD_REV" | tar -x -C "$work/old-src"
	(cd "$work/old-src" && go build -o "$work/old" ./cmd/gpusnap)
fi

start_sleepers "$N"

declare -A ids
for v in "${versions[@]}"; do
	for label in a b; do
		"$work/$v" --no-nvml --capture proc --db "$work/$v.db" snapshot --label "$label" >/dev/null
	done
	for label in a b; do
		ids[$v-$label]=$("$work/$v" --db "$work/$v.db" list --label "$label" --json | sed -n 's/.*"id": "\(.*\)".*/\1/p')
	done
done
procs=$(ls /proc | grep -c '^[0-9]')
echo "host: $(uname -r), $(nproc) CPUs, $procs processes ($N sleeps added), load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
echo "metric procs $procs"
commands=()
for v in "${versions[@]}"; do
	echo "store size: $v $(stat -c %s "$work/$v.db") bytes"
	g="$work/$v --db $work/$v.db"
	commands+=(-n "$v-show" "$g show ${ids[$v-a]}" -n "$v-show-json" "$g show --json ${ids[$v-a]}"
		-n "$v-diff" "$g diff ${ids[$v-a]} ${ids[$v-b]}")
done
# diff exits 1 when the host changed between the two snapshots: -i.
in_background hyperfine -N -i --warmup 3 --runs "$RUNS" --export-json "${EXPORT:-$work/times.json}" "${commands[@]}" >/dev/null

python3 - "${EXPORT:-$work/times.json}" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
wall = {k: v["median"] * 1000 for k, v in r.items()}
cpu = {k: (v["user"] + v["system"]) * 1000 for k, v in r.items()}
print(f"{'command':14s} {'wall ms (median)':>17s} {'CPU ms (mean user+sys)':>23s}")
for k in ("new-show", "new-show-json", "new-diff", "old-show", "old-show-json", "old-diff"):
    if k in r:
        print(f"{k:14s} {wall[k]:17.1f} {cpu[k]:23.1f}")
def ratio(a, b, note=""):
    if a in r and b in r:
        print(f"  {a}/{b}: {cpu[a]/cpu[b]:.2f}x CPU, {wall[a]/wall[b]:.2f}x wall{note}")
print("ratios")
ratio("new-diff", "new-show", "   target <= 3x")
ratio("old-diff", "old-show")
ratio("new-diff", "old-diff")
ratio("new-show", "old-show")
ratio("new-show-json", "old-show-json")
PY
