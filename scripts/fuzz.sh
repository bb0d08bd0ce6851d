#!/usr/bin/env bash
# Runs every fuzz target of the tree for a bounded time each (FUZZTIME, default 8s): the parsers read text that
# a tenant or a stranger's proc root controls. A crash fails the run and leaves its input under the package's
# testdata/fuzz, which `go test` then replays as a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-8s}
git grep -l '^func Fuzz' -- '*_test.go' | while read -r file; do
  pkg=./$(dirname "$file")
  for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
    echo "fuzz: $pkg $target ($fuzztime)"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >/tmp/gpusnap-fuzz.log 2>&1 || { cat /tmp/gpusnap-fuzz.log; exit 1; }
  done
done
