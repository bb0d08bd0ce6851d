#!/bin/sh
# gpusnap Slurm epilog (slurm.conf: Epilog=/usr/share/gpusnap/slurm/epilog.sh).
#
# slurmd runs it as root on the node after the job's processes were killed. A
# non-zero exit is the whole answer, and Slurm then drains the node. The one
# Slurm command it runs, bounded, sets the drain reason first (drain in
# settings.sh). It diffs the host against the job's baseline (gpusnap diff
# --tenant --job-ended: what the job's cgroup still runs is a leftover): a
# process left mapping or holding a GPU, memory no process accounts for, a
# GPU the job used outside its allocation. When something is
# found it writes an evidence bundle to GPUSNAP_EVIDENCE_DIR, logs one line to
# syslog (tag gpusnap), the diff's verdict and lead lines with the bundle's
# path, drains the node with the lead as its reason (GPUSNAP_DRAIN_REASON),
# and exits 1. A diff that could not run (no baseline, unreadable store) is not a
# clean node either: exit 1, with the report's path. Every report and bundle a
# run writes that is not clean is kept, under a name no earlier run has.
#
# With GPUSNAP_REAP=1 it first reaps what the job left (gpusnap reap --tenant
# --yes: the evidence bundle written and verified, then each leftover ended by
# its triage, and the node judged again) and drains only if the node is still
# not clean; the syslog line names what was reaped. The evidence and the
# report are kept either way.
#
# Settings: as the prolog's (settings.sh).
set -u
settings="${0%/*}/settings.sh"
[ -r "$settings" ] || settings=/usr/share/gpusnap/slurm/settings.sh
. "$settings" || { echo "gpusnap: cannot read $settings" >&2; exit 1; }

job=${SLURM_JOB_ID:?SLURM_JOB_ID is not set: run this as the Slurm Epilog}
nvml=
if [ -e /dev/nvidiactl ] || [ -d /proc/driver/nvidia ]; then
	nvml=--require-nvml
fi
mkdir -p -m 0700 "$GPUSNAP_EVIDENCE_DIR" || { say "epilog: job $job: cannot make $GPUSNAP_EVIDENCE_DIR; node not checked"; exit 1; }
# A requeued job keeps its id: the restart count keeps each run's evidence,
# and a run again for the same one writes beside what the last run kept.
name=$(fresh "$GPUSNAP_EVIDENCE_DIR/job-$job.${SLURM_RESTART_COUNT:-0}" .txt .tar.gz .reap .reap.txt)
if [ "${GPUSNAP_REAP:-}" = 1 ]; then
	"$GPUSNAP" reap $nvml --tenant "$job" --job-ended --yes --evidence "$name.reap" ${GPUSNAP_ALLOW:+--allow "$GPUSNAP_ALLOW"} >"$name.reap.txt" 2>&1
	rc=$?
	# The processes ended: "  done    terminate    PID@START (comm): ..." lines.
	reaped=$(sed -n 's/^  done  *\(terminate\|end_parent\|kill_cgroup\|reap_defunct\)  *\([0-9]*@[0-9]* ([^)]*)\).*/\2/p' "$name.reap.txt" | tr '\n' ' ')
	reaped=${reaped% }
	# A clean node with nothing to do keeps no evidence.
	evidence=
	[ -e "$name.reap" ] && evidence="evidence $name.reap, "
	case $rc in
	0)
		say "epilog: job $job: reaped ${reaped:-nothing}; node clean after; ${evidence}report $name.reap.txt"
		exit 0
		;;
	1)
		say "epilog: job $job left GPU state that reap did not end (reaped ${reaped:-nothing}): $(grep -m 1 '^  [a-z]* [a-z_]*: ' "$name.reap.txt" || tail -n 1 "$name.reap.txt"); evidence $name.reap, report $name.reap.txt"
		drain "GPU state reap did not end; job $job; report $name.reap.txt"
		exit 1
		;;
	*)
		say "epilog: job $job: node not reaped or not checked: $(tail -n 1 "$name.reap.txt"); report $name.reap.txt"
		drain "node not checked; job $job; report $name.reap.txt"
		exit 1
		;;
	esac
fi
"$GPUSNAP" diff $nvml --tenant "$job" --job-ended --bundle "$name.tar.gz" ${GPUSNAP_ALLOW:+--allow "$GPUSNAP_ALLOW"} >"$name.txt" 2>&1
case $? in
0)
	# Clean: this run's own report goes, unless a bundle was written beside it.
	[ -e "$name.tar.gz" ] || rm -f "$name.txt"
	exit 0
	;;
1)
	lead=$(lead "$name.txt")
	say "epilog: job $job left GPU state behind: $(verdict "$name.txt"); lead: ${lead:-none}; evidence $name.tar.gz, report $name.txt"
	drain "${lead:-GPU state left behind}; job $job; report $name.txt"
	exit 1
	;;
*)
	say "epilog: job $job: node not checked: $(tail -n 1 "$name.txt"); report $name.txt"
	drain "node not checked; job $job; report $name.txt"
	exit 1
	;;
esac
