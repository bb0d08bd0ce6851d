#!/usr/bin/env bash
# bench/gate.sh: what does the gate add to a job start, beside fuser?
#
# On a host of N processes (default 600: sleeps are added to reach it), in a
# mount namespace of the script's own whose /dev holds GPU-like character
# nodes (nvidia0 195:0, nvidiactl 195:255, nvidia-uvm) and the usual ones,
# and with a BPF filesystem at /sys/fs/bpf (as systemd mounts one), times
# in ROUNDS hyperfine runs, the commands' order alternating, on one host:
#   check  gpusnap check --gpus 0 --no-nvml: a Slurm prolog's gate (the BPF
#          path where the kernel loads it; its store in a throwaway directory)
#   proc   the same with --capture proc: a kernel that refuses the BPF path
#   fuser  fuser -v /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm: the
#          operator's own command on such a host
# and prints check/fuser and proc/fuser, CPU (user+system) beside wall, the
# median of the rounds' ratios [min-max] (target: CPU <= 1.2x), and check's
# wall time: what it adds to a job start.
#
# It installs nothing: it needs go, hyperfine, fuser (psmisc) and unshare
# (util-linux), and root for the namespace and mknod. It kills exactly the
# sleeps it started, by PID, on any exit.
#
# Environment: N (processes on the host, 600), ROUNDS (5), RUNS (timed runs
# per command and round, 5), EXPORT (a file for hyperfine's JSON of the
# last round, which bench/all.sh reads).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z "${GATE_NS:-}" ]]; then
	[[ $(id -u) == 0 ]] || { echo "bench/gate.sh: needs root (a mount namespace, mknod)" >&2; exit 2; }
	GATE_NS=1 exec unshare -m --propagation private "$0" "$@"
fi
source bench/lib.sh

N=${N:-600}
RUNS=${RUNS:-5}
ROUNDS=${ROUNDS:-5}
require_tools go hyperfine fuser

go build -o "$work/gpusnap" ./cmd/gpusnap

# A /dev of this namespace alone: the host's /dev and other runs see none of it.
mount -t tmpfs -o mode=755 tmpfs /dev
bench_unmount=/dev
mknod -m 666 /dev/null c 1 3
mknod -m 666 /dev/zero c 1 5
mknod -m 666 /dev/full c 1 7
mknod -m 666 /dev/random c 1 8
mknod -m 666 /dev/urandom c 1 9
mknod -m 666 /dev/tty c 5 0
mkdir /dev/shm /dev/pts
mknod -m 666 /dev/nvidia0 c 195 0
mknod -m 666 /dev/nvidiactl c 195 255
mknod -m 666 /dev/nvidia-uvm c 511 0

# The BPF path keeps its iterators pinned where a BPF filesystem is mounted.
if [[ "$(stat -f -c %T /sys/fs/bpf 2>/dev/null)" != bpf_fs ]]; then
	mount -t bpf bpf /sys/fs/bpf
fi

have=$(ls /proc | grep -c '^[0-9]')
start_sleepers $((N > have ? N - have : 0))
g="$work/gpusnap --no-nvml --db $work/gate.db"
check="$g check --gpus 0"
fuser="fuser -v /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm"
$check >"$work/check.txt" 2>&1 || true
$check --capture proc >/dev/null 2>&1 || true
procs=$(ls /proc | grep -c '^[0-9]')
echo "host: $(uname -r), $(nproc) CPUs, $procs processes, load $(cut -d' ' -f1-3 /proc/loadavg), hyperfine $(hyperfine --version | cut -d' ' -f2)"
echo "metric procs $procs"
echo "check: $(head -1 "$work/check.txt")"

# -i: check exits 1 where another process of this shared host holds a node
# named nvidia0 (a test's), fuser where no process uses the nodes.
names=(check proc fuser)
cmds=("$check" "$check --capture proc" "$fuser")
for ((r = 0; r < ROUNDS; r++)); do
	args=()
	for ((k = 0; k < 3; k++)); do
		j=$(((k + r) % 3))
		args+=(-n "${names[j]}" "${cmds[j]}")
	done
	in_background hyperfine -N -i --style basic --warmup 1 --runs "$RUNS" --export-csv "$work/round$r.csv" ${EXPORT:+--export-json "$EXPORT"} "${args[@]}" >"$work/hyperfine.txt" 2>&1 || { cat "$work/hyperfine.txt" >&2; exit 1; }
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

# roundN.csv: command,mean,stddev,median,user,system,min,max (seconds)
awk -F, '
	FNR == 1 { r++ }
	FNR > 1 { med[r, $1] = $4; cpu[r, $1] = $5 + $6 }
	function stats(a, n,   i, j, t, s) {
		for (i = 1; i <= n; i++) s[i] = a[i]
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (s[j] < s[i]) { t = s[i]; s[i] = s[j]; s[j] = t }
		return sprintf("%.2fx [%.2f-%.2f]", (n % 2) ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2, s[1], s[n])
	}
	function one(a, n,   i, j, t, s) {
		for (i = 1; i <= n; i++) s[i] = a[i]
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (s[j] < s[i]) { t = s[i]; s[i] = s[j]; s[j] = t }
		return (n % 2) ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2
	}
	END {
		printf "\nratio (median of %d rounds [min-max])  cpu (user+system)     wall (median)\n", r
		split("check proc", a, " ")
		for (k = 1; k <= 2; k++) {
			for (i = 1; i <= r; i++) { c[i] = cpu[i, a[k]] / cpu[i, "fuser"]; w[i] = med[i, a[k]] / med[i, "fuser"] }
			printf "  %-5s/fuser                          %-21s %s   target: cpu <= 1.20x\n", a[k], stats(c, r), stats(w, r)
			printf "metric %s-x-fuser-cpu %.4f\nmetric %s-x-fuser-wall %.4f\n", a[k], one(c, r), a[k], one(w, r)
		}
		for (k = 1; k <= 3; k++) {
			n = (k == 3) ? "fuser" : a[k]
			for (i = 1; i <= r; i++) { c[i] = cpu[i, n] * 1000; w[i] = med[i, n] * 1000 }
			printf "  %-5s wall %.1f ms, cpu %.1f ms (medians of the rounds)\n", n, one(w, r), one(c, r)
			printf "metric %s-wall-ms %.2f\nmetric %s-cpu-ms %.2f\n", n, one(w, r), n, one(c, r)
		}
		for (i = 1; i <= r; i++) w[i] = med[i, "check"] * 1000
		printf "what check adds to a job start: %.1f ms of wall\n", one(w, r)
	}' $(for ((r = 0; r < ROUNDS; r++)); do echo "$work/round$r.csv"; done)
