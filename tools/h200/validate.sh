#!/usr/bin/env bash
# Read-only validation of eerl's meter on a real GPU (run on the lent H200 through the device tool).
# Builds eerl (jansson from unpacked Debian packages in .devcarry/ when the machine has none), lists
# the GPUs, meters a workload with known phases at several sampling intervals while an independent
# reader polls the NVML energy counter over the same window, and writes everything to OUTDIR.
# Nothing here changes a GPU setting: no clock locks, no power limits, no resets.
#   tools/h200/validate.sh OUTDIR [SECONDS_PER_PHASE]
set -euo pipefail
out=${1:?usage: validate.sh OUTDIR [SECONDS]}
secs=${2:-15}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$here"
mkdir -p "$out"
{
    echo "date: $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=index,name,uuid,driver_version,power.limit,clocks.sm,clocks.max.sm,persistence_mode --format=csv
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    uname -r
} >"$out/machine.txt" 2>&1

. tools/h200/build.sh "$out/build.log"
eerl=build-dev/eerl
$eerl --version | tee -a "$out/machine.txt"
$eerl devices | tee "$out/devices.txt"
$eerl devices --json >"$out/devices.json"

for ms in 200 1000; do
    echo "== eerl meter at ${ms} ms around the workload" >&2
    python3 tools/h200/refmeter.py --gpus 0 --poll-ms 10 --out "$out/ref-$ms.json" -- \
        $eerl meter --interval-ms "$ms" --gpus 0 --json --output "$out/meter-$ms.json" -- \
        python3 tools/h200/workload.py --seconds "$secs" --phases "$out/phases-$ms.jsonl"
done
if [ -x build-dev/bench/bench_meter ]; then
    build-dev/bench/bench_meter --real --seconds 20 >"$out/bench-meter-real.txt" 2>&1 || true
fi
python3 tools/h200/summarize.py "$out" | tee "$out/summary.txt"
