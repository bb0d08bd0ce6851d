# bench/lib.sh: what the bench scripts share, sourced by them: a throwaway work
# directory, the extra `sleep` processes that make a busy host, and a cleanup
# that kills exactly those sleeps, by PID, on any exit (Ctrl-C included).

export PATH="$PATH:/usr/local/go/bin"
work=$(mktemp -d)
sleepers=()
# bench_pid is a background command (hyperfine) to stop before the sleeps:
# bash runs a trap only once its foreground command ends, so scripts run
# long commands in the background and wait for them.
bench_pid=
# bench_unmount is a mount point the script mounted, unmounted on exit.
bench_unmount=

bench_cleanup() {
	if [[ -n "$bench_pid" ]]; then
		kill "$bench_pid" 2>/dev/null || true
		wait "$bench_pid" 2>/dev/null || true
	fi
	if ((${#sleepers[@]})); then
		kill "${sleepers[@]}" 2>/dev/null || true
		wait "${sleepers[@]}" 2>/dev/null || true
	fi
	if [[ -n "$bench_unmount" ]]; then
		umount "$bench_unmount" || true
	fi
	rm -rf "$work"
}
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

# require_tools exits 2 naming the first tool missing from PATH.
require_tools() {
	local tool
	for tool in "$@"; do
		if ! command -v "$tool" >/dev/null; then
			echo "$(basename "$0"): $tool is not installed (apt-get install -y hyperfine psmisc; Go from go.dev)" >&2
			exit 2
		fi
	done
}

# start_sleepers N starts N extra `sleep` processes and records their PIDs.
start_sleepers() {
	local i
	for ((i = 0; i < $1; i++)); do
		sleep 3600 &
		sleepers+=($!)
	done
}

# in_background runs a command in the background and waits for it, so an
# interrupt reaches the cleanup at once.
in_background() {
	"$@" &
	bench_pid=$!
	wait "$bench_pid"
	bench_pid=
}
