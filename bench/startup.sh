#!/usr/bin/env bash
# bench/startup.sh: what does a gpusnap command cost before it does anything?
#
# Builds the release binary as the Makefile does (make's gpusnap: PIE,
# stripped, urfave/cli's docs, the NRI plugin and Prometheus's client
# library left out), gpusnap-man (the
# same source with every command and the docs, as the package's build runs
# it) and a Go hello world built with the same flags, without and with cgo,
# then in ONE hyperfine run times, on one host state:
#   hello     the hello world: the Go runtime's and the dynamic linker's floor
#   cgo       the hello world with cgo, libc linked: the floor of any binary
#             that loads libnvidia-ml through go-nvml, as gpusnap does
#   version   gpusnap --version (it prints whether libnvidia-ml is found)
#   help      gpusnap --help
#   man       gpusnap-man --version: what the docs and the NRI plugin cost
#   nopie     gpusnap --version linked without PIE: what PIE costs
#   before    $BEFORE --version, when BEFORE names another gpusnap binary
# and prints each over hello (and version over cgo), CPU (user+system)
# beside wall. Ratios, not times: these machines are shared and noisy.
#
# It installs nothing: it needs go, gcc, make and hyperfine.
#
# Environment: RUNS (timed runs per command, 200), EXPORT (a file for
# hyperfine's JSON, which bench/all.sh reads), BEFORE (a gpusnap built from
# another commit, timed in the same run).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

RUNS=${RUNS:-200}
require_tools go gcc make hyperfine

make -s BUILD="$work" "$work/gpusnap" "$work/gpusnap-man"
# The same release binary linked without PIE: what position independence
# costs at start-up (its relocations are applied to every pointer in the
# binary's data before main runs).
make -s BUILD="$work/nopie" GOBUILD="go build -trimpath -ldflags '-s -w'" "$work/nopie/gpusnap"
mkdir "$work/hello"
cat >"$work/hello/main.go" <<'GO'
package main

import "fmt"

func main() { fmt.Println("hello") }
GO
printf 'module hello\n\ngo 1.26\n' >"$work/hello/go.mod"
# The Makefile's flags less its -X stamps (they name gpusnap's variables).
(cd "$work/hello" && go build -trimpath -buildmode=pie -ldflags '-s -w' -o "$work/hello/hello" .)
mkdir "$work/cgo"
cat >"$work/cgo/main.go" <<'GO'
package main

// #include <stdlib.h>
import "C"
import "fmt"

func main() { fmt.Println("hello") }
GO
printf 'module hello\n\ngo 1.26\n' >"$work/cgo/go.mod"
(cd "$work/cgo" && go build -trimpath -buildmode=pie -ldflags '-s -w' -o "$work/cgo/hello" .)
before=()
[[ -z ${BEFORE:-} ]] || before=(-n before "$BEFORE --version")

echo "host: $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), hyperfine $(hyperfine --version | cut -d' ' -f2)"
echo "sizes: gpusnap $(stat -c %s "$work/gpusnap") bytes, gpusnap-man $(stat -c %s "$work/gpusnap-man"), hello $(stat -c %s "$work/hello/hello")"
echo "package inits: gpusnap $(GODEBUG=inittrace=1 "$work/gpusnap" --version 2>&1 >/dev/null | grep -c '^init '), hello $(GODEBUG=inittrace=1 "$work/hello/hello" 2>&1 >/dev/null | grep -c '^init ')"
echo

in_background hyperfine -N --warmup 10 --runs "$RUNS" --export-csv "$work/times.csv" ${EXPORT:+--export-json "$EXPORT"} \
	-n hello "$work/hello/hello" \
	-n cgo "$work/cgo/hello" \
	-n version "$work/gpusnap --version" \
	-n help "$work/gpusnap --help" \
	-n man "$work/gpusnap-man --version" \
	-n nopie "$work/nopie/gpusnap --version" \
	"${before[@]}"

# times.csv: command,mean,stddev,median,user,system,min,max (seconds)
awk -F, '
	NR > 1 { median[$1] = $4; cpu[$1] = $5 + $6 }
	END {
		printf "\nratio          cpu (user+system)  wall (median)\n"
		split("cgo version help man nopie before", a, " ")
		for (i = 1; i <= 6; i++)
			if (a[i] in cpu)
				printf "  %-7s/hello %.2fx              %.2fx\n", a[i], cpu[a[i]] / cpu["hello"], median[a[i]] / median["hello"]
		printf "  version/cgo   %.2fx              %.2fx\n", cpu["version"] / cpu["cgo"], median["version"] / median["cgo"]
		printf "(target: version/hello <= 2x)\n"
	}' "$work/times.csv"
