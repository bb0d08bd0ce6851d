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
# tree), and this tree's against the old one's. The host is shared: the six
# commands take turns in ROUNDS hyperfine runs of RUNS runs each, so a change
# of load meets all of them; each ratio is also given as the median of the
# rounds' ratios. OLD_REV may be any commit: the build before a change, to
# measure the change.
#
# It needs go, git and hyperfine (Debian package); it kills exactly the
# sleeps it started, by PID, on any exit.
#
# Environment: N (extra processes, 5000), ROUNDS (10), RUNS (timed runs per
# command in a round, 3), OLD_REV (the schema 1 commit).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

N=${N:-5000}
ROUNDS=${ROUNDS:-10}
RUNS=${RUNS:-3}
OLD_REV=${OLD_REV:-bfa0153}
require_tools go git hyperfine

go build -o "$work/new" ./cmd/gpusnap
mkdir "$work/old-src"
git archive "$OLD_REV" | tar -x -C "$work/old-src"
(cd "$work/old-src" && go build -o "$work/old" ./cmd/gpusnap)

start_sleepers "$N"

ids=()
for v in old new; do
	for label in a b; do
		"$work/$v" --no-nvml --capture proc --db "$work/$v.db" snapshot --label "$label" >/dev/null
	done
	ids+=("$("$work/$v" --db "$work/$v.db" list --label a --json | sed -n 's/.*"id": "\(.*\)".*/\1/p')")
	ids+=("$("$work/$v" --db "$work/$v.db" list --label b --json | sed -n 's/.*"id": "\(.*\)".*/\1/p')")
done
procs=$(ls /proc | grep -c '^[0-9]')
echo "host: $(uname -r), $(nproc) CPUs, $procs processes ($N sleeps added), load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
echo "store sizes: old $(stat -c %s "$work/old.db") bytes, new $(stat -c %s "$work/new.db") bytes"

old="$work/old --db $work/old.db" new="$work/new --db $work/new.db"
# diff exits 1 when the host changed between the two snapshots: -i.
for ((round = 0; round < ROUNDS; round++)); do
	in_background hyperfine -N -i --warmup 1 --runs "$RUNS" --export-json "$work/times-$round.json" \
		-n new-show "$new show ${ids[2]}" \
		-n new-show-json "$new show --json ${ids[2]}" \
		-n new-diff "$new diff ${ids[2]} ${ids[3]}" \
		-n old-show "$old show ${ids[0]}" \
		-n old-show-json "$old show --json ${ids[0]}" \
		-n old-diff "$old diff ${ids[0]} ${ids[1]}" >/dev/null
done
echo "end: load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ); $ROUNDS rounds of $RUNS runs each"

python3 - "$work"/times-*.json <<'PY'
import json, statistics, sys
rounds = [{x["command"]: x for x in json.load(open(f))["results"]} for f in sys.argv[1:]]
names = ("new-show", "new-show-json", "new-diff", "old-show", "old-show-json", "old-diff")
# CPU: hyperfine's mean user + system time of a round, averaged over the
# rounds; wall: the median of every run.
cpu = {k: statistics.mean((r[k]["user"] + r[k]["system"]) * 1000 for r in rounds) for k in names}
wall = {k: statistics.median(t * 1000 for r in rounds for t in r[k]["times"]) for k in names}
print(f"{'command':14s} {'wall ms (median)':>17s} {'CPU ms (mean user+sys)':>23s}")
for k in names:
    print(f"{k:14s} {wall[k]:17.1f} {cpu[k]:23.1f}")
def ratio(a, b, note=""):
    per = sorted((r[a]["user"] + r[a]["system"]) / (r[b]["user"] + r[b]["system"]) for r in rounds)
    print(f"  {a}/{b}: {cpu[a]/cpu[b]:.2f}x CPU (rounds: median {statistics.median(per):.2f}x, {per[0]:.2f}-{per[-1]:.2f}x), {wall[a]/wall[b]:.2f}x wall{note}")
print("ratios")
ratio("new-diff", "new-show", "   target <= 3x")
ratio("old-diff", "old-show")
ratio("new-diff", "old-diff")
ratio("new-show", "old-show")
ratio("new-show-json", "old-show-json")
PY
