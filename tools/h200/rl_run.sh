#!/usr/bin/env bash
# A real GRPO run (examples/grpo_tiny.py, GPU-sized) with eerl in observe-only mode on the lent GPU
# machine: eerl's trace, the per-update log with an independent pynvml reading of the energy
# counters at every update boundary, an NVML sampler of power, clocks and throttle reasons, and
# the meter's CPU cost on real counters. Nothing here changes a GPU setting: no clock locks, no
# power limits, no resets (eerl runs observe-only).
#   tools/h200/rl_run.sh OUTDIR colocated[:GPU]|disaggregated SECONDS [more grpo_tiny arguments]
# colocated: everything on one GPU (GPU 0, or the index after the colon). disaggregated:
# generation on GPU 0, log-probs and training on GPU 1, refit copies the weights across; eerl
# meters both GPUs as two pools. Two colocated runs may share a machine of two GPUs (one per GPU):
# build once first (. tools/h200/build.sh LOG) and give each run RL_BUILT=1 so that they do not
# build into the same folder at once; RL_BENCH_METER=0 leaves the meter-cost pass out.
set -euo pipefail
out=${1:?usage: rl_run.sh OUTDIR colocated[:GPU]|disaggregated SECONDS [grpo_tiny args]}
mode=${2:?mode}
secs=${3:?seconds}
shift 3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$here"
mkdir -p "$out"
case $mode in
colocated) gpus=0 ;;
colocated:[0-9] | colocated:[0-9][0-9]) gpus=${mode#colocated:} mode=colocated ;;
disaggregated) gpus=0,1 devs=(--device cuda:0 --train-device cuda:1) ;;
*) echo "rl_run.sh: mode must be colocated, colocated:GPU or disaggregated, not '$mode'" >&2; exit 2 ;;
esac
if [ "$mode" = colocated ]; then devs=(--device "cuda:$gpus"); fi
if [ "${RL_BUILT:-0}" = 1 ] && [ -n "${EERL_LIBRARY:-}" ]; then
    echo "built by the caller: $EERL_LIBRARY" >"$out/build.log"
else
    . tools/h200/build.sh "$out/build.log"
fi
{
    echo "date: $(date -u +%FT%TZ)"
    echo "mode: $mode on GPU(s) $gpus"
    nvidia-smi --query-gpu=index,name,uuid,driver_version,power.limit,clocks.sm,clocks.max.sm,persistence_mode --format=csv
    python3 -c 'import torch, pynvml; print("torch", torch.__version__, "cuda", torch.version.cuda); pynvml.nvmlInit(); print("nvml", pynvml.nvmlSystemGetNVMLVersion())'
    uname -r
    nproc
    build-dev/eerl --version
    build-dev/eerl devices
} >"$out/machine.txt" 2>&1
rm -f "$out/.stop"
python3 tools/h200/sampler.py --gpus "$gpus" --interval-ms 50 --seconds $((secs + 300)) \
    --stop-file "$out/.stop" --out "$out/samples.csv" &
sampler=$!
meter_pid=
if [ "$mode" = colocated ] && [ "${RL_BENCH_METER:-1}" = 1 ]; then
    # The meter's own cost on real counters while the GPU works (a separate process; two passes,
    # counters every tick and the default schedule, each of these seconds, within the run).
    half=$((secs / 2))
    build-dev/bench/bench_meter --real --seconds $((half > 200 ? 200 : half)) \
        >"$out/bench-meter.txt" 2>&1 &
    meter_pid=$!
fi
rc=0
PYTHONUNBUFFERED=1 python3 examples/grpo_tiny.py --config gpu "${devs[@]}" --eerl observe \
    --eerl-mode "$mode" --eerl-gpus "$gpus" --trace "$out/trace.jsonl" --log "$out/log.jsonl" \
    --nvml-reference --updates 100000 --time-budget "$secs" "$@" >"$out/stdout.txt" 2>&1 || rc=$?
touch "$out/.stop"
wait "$sampler" || true
[ -n "$meter_pid" ] && { wait "$meter_pid" || true; }
rm -f "$out/.stop"
tail -3 "$out/stdout.txt"
echo "rl_run.sh: grpo_tiny exit $rc, $(wc -l <"$out/log.jsonl") updates" | tee -a "$out/machine.txt"
exit $rc
