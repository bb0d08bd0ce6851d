#!/bin/sh
# gpusnap Slurm prolog (slurm.conf: Prolog=/usr/share/gpusnap/slurm/prolog.sh).
#
# slurmd runs it as root on the node before the job starts, with SLURM_JOB_ID
# and, for a job given GPUs, SLURM_JOB_GPUS in its environment. A non-zero
# exit is the whole answer, and Slurm then drains the node and requeues the
# job (the one Slurm command it runs sets the drain reason first). It records the job's baseline, with its
# GPUs, for the epilog's diff, and judges those GPUs from that same capture
# (gpusnap baseline --gpus): it refuses the node when one is held, mapped or
# listed by a process not allowed, or holds memory no process accounts for.
# One capture is the gate and the baseline, so no process can let go of a
# GPU while it is checked and take it again before the baseline is taken.
# The reason goes to syslog (tag gpusnap) with the path of the full report,
# and, as the epilog's, becomes the node's drain reason (GPUSNAP_DRAIN_REASON).
#
# The syslog line carries check's verdict and lead lines. Settings (GPUSNAP,
# GPUSNAP_DB, GPUSNAP_EVIDENCE_DIR, GPUSNAP_ALLOW, GPUSNAP_SYSLOG_SOCKET): the
# environment, else /etc/default/gpusnap, else defaults (settings.sh).
set -u
settings="${0%/*}/settings.sh"
[ -r "$settings" ] || settings=/usr/share/gpusnap/slurm/settings.sh
. "$settings" || { echo "gpusnap: cannot read $settings" >&2; exit 1; }

job=${SLURM_JOB_ID:?SLURM_JOB_ID is not set: run this as the Slurm Prolog}
# Where the NVIDIA driver is loaded, a GPU's memory must be read: an NVML that
# cannot be is an error, not a skipped check.
nvml=
if [ -e /dev/nvidiactl ] || [ -d /proc/driver/nvidia ]; then
	nvml=--require-nvml
fi
mkdir -p -m 0700 "$GPUSNAP_EVIDENCE_DIR" || { say "prolog: job $job: cannot make $GPUSNAP_EVIDENCE_DIR; node refused"; exit 1; }
report="$(fresh "$GPUSNAP_EVIDENCE_DIR/prolog-$job.${SLURM_RESTART_COUNT:-0}" .txt).txt"

# A job given no GPU is not refused for GPUs in use by other jobs: its
# baseline judges nothing. baseline --gpus exits 1 when its GPUs are not
# clean, 2 when they are not known to be clean or no baseline was stored.
if [ -n "${SLURM_JOB_GPUS:-}" ]; then
	"$GPUSNAP" baseline $nvml --tenant "$job" --gpus "$SLURM_JOB_GPUS" ${GPUSNAP_ALLOW:+--allow "$GPUSNAP_ALLOW"} >"$report" 2>&1
else
	"$GPUSNAP" baseline $nvml --tenant "$job" >"$report" 2>&1
fi
rc=$?
case $rc in
0)
	rm -f "$report"
	exit 0
	;;
1)
	lead=$(lead "$report")
	say "prolog: job $job: GPUs $SLURM_JOB_GPUS in use: $(verdict "$report"); lead: ${lead:-none}; node refused, report $report"
	drain "GPUs $SLURM_JOB_GPUS in use: ${lead:-not clean}; job $job refused; report $report"
	;;
*)
	if [ -n "${SLURM_JOB_GPUS:-}" ] && grep -q -E '^gpusnap check: ' "$report"; then
		say "prolog: job $job: GPUs $SLURM_JOB_GPUS not known to be clean (gpusnap baseline exit $rc): $(verdict "$report"); node refused, report $report"
		drain "GPUs $SLURM_JOB_GPUS not known to be clean; job $job refused; report $report"
	else
		say "prolog: job $job: no baseline: $(tail -n 1 "$report"); node refused, report $report"
		drain "no baseline; job $job refused; report $report"
	fi
	;;
esac
exit 1
