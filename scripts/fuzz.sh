#!/usr/bin/env bash
# Runs every fuzz target of the tree for a bounded time each (FUZZTIME, default 8s): the parsers read text that
# a tenant or a stranger's proc root controls. A crash fails the run and leaves its input under the package's
# testdata/fuzz, which `go test` then replays as a regression test.
#
# Go 1.26's fuzz coordinator can end a duration-bounded run with a bare "context deadline exceeded" when its
# deadline fires while a starved worker is mid-call (go.dev/issue/75804, fixed in Go 1.27). Such a run wrote no
# failing input, so it is run once more. A second failure, or any other failure, fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-8s}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# deadlineOnly reports whether the log's only failure is the coordinator's deadline.
deadlineOnly() {
  grep -q '^    context deadline exceeded$' "$log" &&
    ! grep -q -e 'Failing input written' -e '^panic' -e '_test\.go:[0-9]*:' "$log"
}

git grep -l '^func Fuzz' -- '*_test.go' | while read -r file; do
  pkg=./$(dirname "$file")
  for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
    for try in 1 2; do
      echo "fuzz: $pkg $target ($fuzztime)"
      go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >"$log" 2>&1 && break
      if [[ $try == 1 ]] && deadlineOnly; then
        echo "fuzz: $target ended on the coordinator's deadline with no failing input; once more"
        continue
      fi
      cat "$log"
      exit 1
    done
  done
done
