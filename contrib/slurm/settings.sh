# gpusnap Slurm scripts' settings and syslog line, sourced by prolog.sh and
# epilog.sh (they find it beside themselves, else in /usr/share/gpusnap/slurm).
#
# Each setting comes from the environment (slurmd's, or a wrapper's export),
# else from the first readable of gpusnap.conf beside the scripts and
# /etc/default/gpusnap (shell assignments), else from its default below:
#   GPUSNAP                the binary (default: gpusnap on PATH)
#   GPUSNAP_DB             the store (default: gpusnap's own, /var/lib/gpusnap/gpusnap.db as root)
#   GPUSNAP_EVIDENCE_DIR   reports and bundles (default /var/lib/gpusnap/evidence)
#   GPUSNAP_ALLOW          an allow list of expected workloads (default: none)
#   GPUSNAP_SYSLOG_SOCKET  logger's socket (default: /dev/log)
#   GPUSNAP_EXPECT_WATCH   1 where gpusnap watch records: a window its log misses fails (default: empty)
#   GPUSNAP_REAP           1: the epilog reaps the job's leftovers before it decides to drain (default: empty)
#   GPUSNAP_DRAIN_REASON   1: a hook that refuses the node first drains it with scontrol, the reason naming the
#                          report's lead; empty: Slurm drains it with its own reason alone (default: 1)
gpusnap_settings="GPUSNAP GPUSNAP_DB GPUSNAP_EVIDENCE_DIR GPUSNAP_ALLOW GPUSNAP_SYSLOG_SOCKET GPUSNAP_EXPECT_WATCH GPUSNAP_REAP GPUSNAP_DRAIN_REASON"
for conf in "${0%/*}/gpusnap.conf" /etc/default/gpusnap; do
	[ -r "$conf" ] || continue
	for var in $gpusnap_settings; do
		eval "isset=\${$var+set}"
		[ -n "$isset" ] && continue
		# Read in a subshell: the file sets only what the environment left unset.
		val=$(. "$conf" >/dev/null 2>&1; eval "printf '%s' \"\${$var-}\"; [ -n \"\${$var+set}\" ] && printf x")
		case $val in
		*x) eval "$var=\${val%x}" ;;
		esac
	done
	break
done
: "${GPUSNAP:=$(command -v gpusnap)}"
: "${GPUSNAP:=gpusnap}"
: "${GPUSNAP_EVIDENCE_DIR:=/var/lib/gpusnap/evidence}"
: "${GPUSNAP_ALLOW:=}"
: "${GPUSNAP_SYSLOG_SOCKET:=}"
: "${GPUSNAP_DRAIN_REASON=1}"
[ -n "${GPUSNAP_DB:-}" ] && export GPUSNAP_DB
[ -n "${GPUSNAP_EXPECT_WATCH:-}" ] && export GPUSNAP_EXPECT_WATCH

# say logs one line for the operator: syslog (tag gpusnap), and stderr for slurmd's debug log.
say() {
	echo "gpusnap: $*" >&2
	logger -t gpusnap -p daemon.err ${GPUSNAP_SYSLOG_SOCKET:+-u "$GPUSNAP_SYSLOG_SOCKET"} -- "$*" 2>/dev/null || true
}

# verdict is the command's own verdict line in a report (gpusnap diff: 2
# high, ... / gpusnap check: ...), whatever it printed on stderr beside it;
# a report without one (the command failed) gives its last line.
verdict() {
	grep -m 1 -E '^gpusnap (diff|check): ' "$1" || tail -n 1 "$1"
}

# lead is a report's lead line (what to act on first, and whose), less its
# label, or "" where the report has none.
lead() {
	sed -n 's/^lead: //p' "$1" | head -n 1
}

# drain drains this node with the reason "gpusnap: $1" before the hook's
# non-zero exit does. Slurm keeps the reason of a node drained already, where
# its own would say only "Epilog error". It is the one Slurm command the hooks
# run, bounded by a timeout, and GPUSNAP_DRAIN_REASON= turns it off. The exit
# drains the node whether or not it ran.
drain() {
	[ "$GPUSNAP_DRAIN_REASON" = 1 ] || return 0
	timeout 10 scontrol update NodeName="${SLURMD_NODENAME:-$(hostname -s)}" State=DRAIN Reason="gpusnap: $1" >/dev/null 2>&1 ||
		echo "gpusnap: scontrol could not set the drain reason: Slurm's own stands" >&2
}

# fresh prints BASE, else BASE.1, BASE.2 ...: the first name that none of BASE's
# files (the name and each suffix given) have yet. A hook run again for the same
# job (slurmd's retry, an operator's re-run) keeps what an earlier run wrote.
fresh() {
	fresh_base=$1
	shift
	fresh_name=$fresh_base
	fresh_n=0
	while :; do
		fresh_taken=
		for fresh_ext in "$@"; do
			[ -e "$fresh_name$fresh_ext" ] && fresh_taken=1
		done
		[ -z "$fresh_taken" ] && break
		fresh_n=$((fresh_n + 1))
		fresh_name="$fresh_base.$fresh_n"
	done
	printf '%s\n' "$fresh_name"
}
