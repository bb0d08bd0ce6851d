#!/bin/sh
# The README's tour, run as it is written: a fake GPU (a loop device's block
# node named nvidia0), a baseline, a job (scripts/tour/job.py) that leaves a
# setsid worker mapping the GPU, ps of the worker, the diff with its bundle,
# and the bundle verified. It prints each command after "$ " and what it
# printed, as the README shows them.
#
# Needs root (losetup, mknod), python3 and util-linux's unshare. It runs in a
# PID and mount namespace of its own, so that a shared machine's other
# processes stay out of the tour, with --no-nvml, as on a machine without
# NVML. GPUSNAP is the binary (default: gpusnap on PATH), TOUR_DIR the
# directory it works in (default: a fresh one under /tmp), removed after
# unless TOUR_KEEP=1.
set -eu
if [ "${GPUSNAP_TOUR_NS:-}" != 1 ]; then
	[ "$(id -u)" = 0 ] || { echo "tour: run it as root: it makes a loop device and a device node" >&2; exit 2; }
	GPUSNAP=$(command -v "${GPUSNAP:-gpusnap}") || { echo "tour: no gpusnap binary (set GPUSNAP)" >&2; exit 2; }
	export GPUSNAP GPUSNAP_TOUR_NS=1
	exec unshare --pid --fork --mount-proc "$0" "$@"
fi
here=$(cd "${0%/*}" && pwd)
dir=${TOUR_DIR:-$(mktemp -d /tmp/tour.XXXXXX)}
mkdir -p "$dir/dev"
cd "$dir"
truncate -s 1M gpu.img
loop=$(losetup -f --show gpu.img)
worker=
cleanup() {
	[ -n "$worker" ] && kill -9 "$worker" 2>/dev/null
	losetup -d "$loop"
	[ "${TOUR_KEEP:-}" = 1 ] || rm -rf "$dir"
}
trap cleanup EXIT
set -- $(stat -c '%t %T' "$loop")
mknod dev/nvidia0 b "$((0x$1))" "$((0x$2))"
export GPUSNAP_DB="$dir/gpusnap.db"

# gpusnap is the binary, without NVML; show prints a command as typed.
gpusnap() { "$GPUSNAP" --no-nvml "$@"; }
show() { printf '$ %s\n' "$*"; }

show gpusnap baseline --tenant job-4242
gpusnap baseline --tenant job-4242 2>&1
show python3 job.py dev/nvidia0 worker.pid
python3 "$here/tour/job.py" dev/nvidia0 worker.pid
worker=$(cat worker.pid)
show gpusnap ps -p '"$(cat worker.pid)"'
gpusnap ps -p "$worker" 2>&1
show gpusnap diff --tenant job-4242 --bundle job-4242.tar.gz
rc=0
gpusnap diff --tenant job-4242 --bundle job-4242.tar.gz 2>&1 || rc=$?
show 'echo $?'
echo "$rc"
show gpusnap verify job-4242.tar.gz
gpusnap verify job-4242.tar.gz 2>&1
