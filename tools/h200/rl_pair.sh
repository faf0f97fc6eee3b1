#!/usr/bin/env bash
# Two independent colocated GRPO runs side by side on a machine of two GPUs (one run per GPU,
# observe-only, as tools/h200/rl_run.sh), so that one lease gives two traces of the same
# configuration. Built once; each run's folder is packed into OUTDIR/NAME-gpuK.tar.gz (the
# device tool brings back few files).
#   tools/h200/rl_pair.sh OUTDIR NAME SECONDS SEED0 SEED1 [more grpo_tiny arguments]
# GPU 0 runs with --seed SEED0, GPU 1 with --seed SEED1; the meter-cost pass is left out.
set -euo pipefail
out=${1:?usage: rl_pair.sh OUTDIR NAME SECONDS SEED0 SEED1 [grpo_tiny args]}
name=${2:?name}
secs=${3:?seconds}
seed0=${4:?seed for GPU 0}
seed1=${5:?seed for GPU 1}
shift 5
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$here"
mkdir -p "$out"
work=$(mktemp -d)
. tools/h200/build.sh "$work/build.log"
export RL_BUILT=1 RL_BENCH_METER=0
rc0=0 rc1=0
tools/h200/rl_run.sh "$work/$name-gpu0" colocated:0 "$secs" --seed "$seed0" "$@" \
    >"$work/run0.txt" 2>&1 &
p0=$!
tools/h200/rl_run.sh "$work/$name-gpu1" colocated:1 "$secs" --seed "$seed1" "$@" \
    >"$work/run1.txt" 2>&1 &
p1=$!
wait "$p0" || rc0=$?
wait "$p1" || rc1=$?
for k in 0 1; do
    cp "$work/build.log" "$work/$name-gpu$k/build.log"
    tail -2 "$work/run$k.txt"
    tar -C "$work" -czf "$out/$name-gpu$k.tar.gz" "$name-gpu$k"
done
echo "rl_pair.sh: GPU 0 exit $rc0, GPU 1 exit $rc1"
[ "$rc0" = 0 ] && [ "$rc1" = 0 ]
