#!/usr/bin/env bash
# The size and speed figures for the store, on this host with 500 extra
# `sleep` processes: BenchmarkStore (sizes, in-process list/get, store over
# capture), then hyperfine on the commands an operator runs against the
# 1,000-snapshot store it leaves behind (list, show of the 500th). The sleeps
# are killed by PID on exit. Run as root on a quiet machine: bench/store.sh
# (STORE_RUNS: hyperfine's runs, 30; EXPORT: where its JSON goes).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
require_tools go hyperfine

out=bench/out
mkdir -p "$out"
chmod 0700 "$out"
db="$PWD/$out/store-bench.db"
bin="$PWD/$out/gpusnap"
go build -o "$bin" ./cmd/gpusnap

start_sleepers 500

GPUSNAP_BENCH_DB="$db" go test -run x -bench '^BenchmarkStore$' -benchtime 1x ./bench/ | tee "$out/store-bench.txt"

id=$("$bin" list --db "$db" --json | sed -n 's/.*"id": "\(.*\)".*/\1/p' | sed -n 500p)
hyperfine -N --warmup 3 --runs "${STORE_RUNS:-30}" --export-json "${EXPORT:-$out/store-hyperfine.json}" \
  -n list "$bin list --db $db" \
  -n list-json "$bin list --json --db $db" \
  -n show "$bin show --db $db $id" \
  -n show-json "$bin show --json --db $db $id"
# Storing over capturing is BenchmarkStore's store-over-capture, alternated in
# one process: hyperfine runs each command's batch apart, and the load of a
# shared machine swings a 100 ms capture by more than the 10% to be measured.
python3 - "${EXPORT:-$out/store-hyperfine.json}" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
for n in ("list", "list-json", "show", "show-json"):
    print(f"{n:10s} {r[n]['mean']*1000:7.1f} ms (max {r[n]['max']*1000:.1f} ms)")
PY
