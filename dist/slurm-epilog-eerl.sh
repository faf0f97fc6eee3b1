#!/bin/sh
# Slurm epilog: after every job, return the job's GPUs to the default clock governor through
# eerld, so a job that locked clocks (or a client eerld could not reach in time) never slows the
# next job on the node. eerld already resets a client's GPUs when it disconnects or dies; this
# is the belt to those braces, and it also clears a lock a job made in-process as root.
#
# slurm.conf:   Epilog=P/share/eerl/slurm-epilog-eerl.sh (installed there by `cmake --install
# build --prefix P`, with the eerl below made P/bin/eerl)
# Runs as root. SLURM_JOB_GPUS (set in the epilog on nodes with GPU GRES) names the job's GPUs;
# on a node without it, every GPU is reset (right for whole-node allocations). The indices must
# match NVML's (the usual case when gres.conf uses AutoDetect=nvml).
# Exit status: non-zero when a reset fails, so Slurm drains the node instead of giving a GPU
# with a stuck clock to the next job.
EERL=${EERL:-/usr/bin/eerl}
SOCK=${EERL_SOCKET:-/run/eerl/eerld.sock}

[ -S "$SOCK" ] || exit 0 # eerld not running on this node: nothing of ours to reset
if [ -n "${SLURM_JOB_GPUS:-}" ]; then
    out=$("$EERL" reset --socket "$SOCK" --gpus "$SLURM_JOB_GPUS" 2>&1)
else
    out=$("$EERL" reset --socket "$SOCK" 2>&1)
fi
rc=$?
if [ $rc -ne 0 ]; then
    logger -t eerl-epilog "job ${SLURM_JOB_ID:-?}: eerl reset failed: $out"
    exit 1
fi
exit 0
