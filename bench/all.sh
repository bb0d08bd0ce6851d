#!/usr/bin/env bash
# bench/all.sh: every comparison of bench/ and of the packages' benchmarks, in
# one run on one host state, written as docs/performance.md (bench/perfdoc
# renders it). Each step's command is the one a row names to reproduce it.
#
#   bench/all.sh [--quick] [--only "STEP..."] [--out FILE] [--keep DIR]
#
# --quick runs each step with fewer rounds and one small host size, and no
# kernel matrix: the shape of the page, not figures to quote. --only runs the
# steps named (the page's last table names them), the other rows "not run".
# --keep DIR leaves every step's raw output there. A step that fails is
# named on the page, its rows "not measured", and the script exits 1.
# Needs root (the BPF path, other callers, loop devices), go, make, hyperfine,
# fuser, lsof, gcc, losetup, git and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

quick= only= out=docs/performance.md keep=
while (($#)); do
	case $1 in
	--quick) quick=1 ;;
	--only) only=$2 && shift ;;
	--out) out=$2 && shift ;;
	--keep) keep=$2 && shift ;;
	*) echo "usage: bench/all.sh [--quick] [--only \"STEP...\"] [--out FILE] [--keep DIR]" >&2 && exit 2 ;;
	esac
	shift
done
[[ $(id -u) == 0 ]] || { echo "bench/all.sh: needs root (the BPF path, other callers, loop devices)" >&2; exit 2; }
for tool in go make hyperfine fuser lsof gcc losetup git python3; do
	command -v "$tool" >/dev/null || { echo "bench/all.sh: $tool is not installed" >&2; exit 2; }
done

res=${keep:-$(mktemp -d)}
mkdir -p "$res"
[[ -n "$keep" ]] || trap 'rm -rf "$res"' EXIT

if [[ -n "$quick" ]]; then
	sizes="100" gateSizes=600 gateRounds=1 gateRuns=2 runs=3 startupRuns=20 few=2x many=20x extra=100 codecN=200 idle=3 util=100x npdN=1x watchrun="ROUNDS=1 LOOPS=50000 SECONDS_=2" hostile="RUNS=3 COUNT=20000 CHILDREN=10"
else
	sizes="500 2000 5000 20000" gateSizes="600 5000" gateRounds=5 gateRuns=5 runs=10 startupRuns=200 few=10x many=1s extra=500 codecN=5000 idle=60 util=1800x npdN=3x watchrun="ROUNDS=3" hostile="RUNS=10"
fi

{
	echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "kernel=$(uname -r)"
	echo "cpus=$(nproc)"
	echo "commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs/performance.md' || echo ', modified')"
	echo "mode=$([[ -n "$quick" ]] && echo quick || echo full)"
	echo "sizes=$sizes"
	echo "only=$only"
	echo "load_before=$(cut -d' ' -f1-3 /proc/loadavg)"
	echo "procs_before=$(ls /proc | grep -c '^[0-9]')"
} >"$res/host.txt"
: >"$res/steps.tsv"

# step NAME COMMAND: runs COMMAND (as typed into a shell: what the page prints
# to reproduce the rows) with EXPORT naming where a bench script writes its
# hyperfine JSON; records its exit status and seconds.
failed=0
step() {
	local name=$1 cmd=$2 t0 rc=0
	[[ -z "$only" || " $only " == *" $name "* ]] || return 0
	t0=$(date +%s)
	echo "== $name: $cmd" >&2
	EXPORT="$res/$name.json" bash -c "$cmd" >"$res/$name.out" 2>&1 </dev/null || rc=$?
	((rc == 0)) || { failed=1 && echo "   failed ($rc): $(tail -n 3 "$res/$name.out")" >&2; }
	printf '%s\t%s\t%d\t%d\n' "$name" "$cmd" "$rc" $(($(date +%s) - t0)) >>"$res/steps.tsv"
}

step startup "RUNS=$startupRuns bench/startup.sh"
for n in $sizes; do
	step "command-$n" "N=$n RUNS=$runs bench/run.sh"
done
step check "N=$extra RUNS=$runs bench/check.sh"
for n in $gateSizes; do
	step "gate-$n" "N=$n ROUNDS=$gateRounds RUNS=$gateRuns bench/gate.sh"
done
step tenant "N=$extra RUNS=$runs bench/diff.sh"
step codec "N=$codecN RUNS=$runs OLD_REV=none bench/codec.sh"
step store "STORE_RUNS=$runs bench/store.sh"
step watch "N=$extra IDLE=$idle $watchrun bench/watch.sh"
step hostile "$hostile bench/hostile.sh"
if [[ -n "$quick" ]]; then
	step procpath "go test -run x -bench 'ProcPath/600\$' -benchtime $few ./bench/"
	step paths "go test -run x -bench 'Paths/600\$|HeavyProcess' -benchtime 1x ./bench/"
else
	step procpath "go test -run x -bench ProcPath -benchtime $few ./bench/"
	step paths "go test -run x -bench 'Paths|HeavyProcess' -benchtime 5x ./bench/"
fi
step overfloor "go test -run x -bench CaptureOverFloor -benchtime $few ./bench/"
step maps "go test -run x -bench 'MapsScanner|ProcfsProcMaps' -benchtime $many ./bench/"
step refused "go test -run x -bench RefusedAuto -benchtime $few ./bench/"
step npd "go test -run x -bench CheckNPD -benchtime $npdN ./bench/"
step triage "go test -run x -bench Triage -benchtime $few ./capture/"
step tenantgo "go test -run x -bench DiffTenantVsSnapshot -benchtime $few ./cmd/gpusnap/"
step compare "go test -run x -bench Compare -benchtime $many ./diff/"
step storego "go test -run x -bench 'LogAppend|VerifyLog10000|DecodeRecord' -benchtime $many ./store/"
step nvml "go test -run x -bench . -benchtime $many ./nvmlread/"
step kmsg "go test -run x -bench . -benchtime $many ./kmsg/"
step util "go test -run x -bench Util -benchtime $util ./watch/"
step fallback "go test -run x -bench FallbackIdle -benchtime 1x ./watch/"
step hooks "go test -count=1 -run TestHookCost -v ./bpf/"
# The matrix's own directory: a matrix another run starts meanwhile in the
# default one would overwrite its initramfs and logs.
[[ -n "$quick" ]] || KERNEL_MATRIX_DRM=1 KERNEL_MATRIX_DIR="$res/kernel-matrix" step matrix "scripts/kernel-matrix.sh"

echo "load_after=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$res/host.txt"
echo "procs_after=$(ls /proc | grep -c '^[0-9]')" >>"$res/host.txt"
go run ./bench/perfdoc -results "$res" -out "$out" || failed=1
echo "bench/all.sh: wrote $out" >&2
exit "$failed"
