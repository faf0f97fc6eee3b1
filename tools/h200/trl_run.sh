#!/usr/bin/env bash
# TRL's GRPOTrainer on the lent GPU machine with eerl observing (eerl.integrations.trl, observe-
# only), Zeus's ZeusMonitor and an independent pynvml counter reading beside it, in one call:
# installs the carried wheels (.whl/, when there), builds eerl (tools/h200/build.sh), records the
# machine, starts the NVML sampler, runs tools/h200/trl_grpo.py (completions up to 768 tokens
# unless the arguments say otherwise), then the analysis (tools/h200/trl_summary.py and eerl
# analyze --forward-test), then the phase-mark benchmark on the real driver (bench_meter --marks
# --real, read-only, about 20 s), and packs the run into OUTDIR.
# Nothing here changes a GPU setting: no clock locks, no power limits, no resets.
#   tools/h200/trl_run.sh OUTDIR SECONDS [more trl_grpo.py arguments]
# SECONDS: the whole script's wall time (a device call's limit, less a margin): training stops
# early enough (trl_grpo.py --stop-by) to leave 20 s for the analysis and packing and
# TRL_BENCH_S (default 30) for the benchmark.
# OUTDIR gets trl-grpo.tar.gz (the whole run folder), summary.md, forward-test.txt,
# eerl-vs-zeus.png and bench-meter-marks.txt; the end of the output is the short tables and the
# benchmark's lines.
# Environment: TRL_PYTHON (default python3), RL_BUILT=1 with EERL_LIBRARY and EERL_BIN set to
# skip the build (a CPU check; BENCH_METER then names bench_meter, else the benchmark is left
# out), TRL_SAMPLER=0 to leave the sampler out, TRL_BENCH=0 to leave the benchmark out,
# TRL_BENCH_UPDATES (default 4) for its --updates.
set -euo pipefail
out=${1:?usage: trl_run.sh OUTDIR SECONDS [trl_grpo.py args]}
secs=${2:?seconds for the whole script}
shift 2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$here"
py=${TRL_PYTHON:-python3}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
run="$work/trl-grpo"  # outside OUTDIR: the device tool brings back few files
mkdir -p "$run"
t0=$(date +%s)
t0m=$("$py" -c 'import time; print(time.monotonic())')
bench=${TRL_BENCH:-1}
bench_s=${TRL_BENCH_S:-30}
[ "$bench" = 1 ] || bench_s=0
stop_by=$("$py" -c "print($t0m + $secs - 20 - $bench_s)")
stamp() { echo "trl_run.sh: $1 at +$(($(date +%s) - t0)) s"; }

if ls .whl/*.whl >/dev/null 2>&1 && [ "${TRL_WHEELS:-1}" = 1 ]; then
    site=$(mktemp -d)
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" .whl/*.whl >"$run/wheels.log" 2>&1 ||
        { cat "$run/wheels.log"; echo "trl_run.sh: installing .whl/*.whl failed" >&2; exit 1; }
    ls .whl >>"$run/wheels.log"
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    stamp "wheels installed"
fi
if [ "${RL_BUILT:-0}" = 1 ] && [ -n "${EERL_LIBRARY:-}" ]; then
    echo "built by the caller: $EERL_LIBRARY" >"$run/build.log"
    eerl_bin=${EERL_BIN:?RL_BUILT=1 needs EERL_BIN}
    bench_bin=${BENCH_METER:-}
else
    . tools/h200/build.sh "$run/build.log"
    eerl_bin=build-dev/eerl
    bench_bin=build-dev/bench/bench_meter
    stamp "eerl built"
fi
{
    echo "date: $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=index,name,uuid,driver_version,power.limit,clocks.sm,clocks.max.sm,persistence_mode --format=csv 2>&1 || echo "(no nvidia-smi)"
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
    "$py" -c 'import pynvml; pynvml.nvmlInit(); print("nvml", pynvml.nvmlSystemGetNVMLVersion())' 2>&1 || true
    "$py" -m pip list 2>/dev/null | grep -iE '^(trl|transformers|accelerate|datasets|tokenizers|zeus|nvidia-ml-py|pyarrow|fsspec|huggingface.hub|safetensors|numpy|pandas|scikit-learn) ' || true
    uname -r
    nproc
    "$eerl_bin" --version
    "$eerl_bin" devices
} >"$run/machine.txt" 2>&1
sampler=
rm -f "$run/.stop"
if [ "${TRL_SAMPLER:-1}" = 1 ]; then
    "$py" tools/h200/sampler.py --gpus 0 --interval-ms 50 --seconds "$secs" \
        --stop-file "$run/.stop" --out "$run/samples.csv" >"$run/sampler.log" 2>&1 &
    sampler=$!
fi
stamp "training starts"
rc=0
# a hang must not eat the analysis: the run is stopped (SIGTERM: eerl's session closes) 12 s
# (and the benchmark's time) before the script's end, and what it wrote by then is analysed
left=$((secs - 12 - bench_s - ($(date +%s) - t0)))
PYTHONUNBUFFERED=1 timeout -k 5 "$left" "$py" tools/h200/trl_grpo.py --out "$run" \
    --stop-by "$stop_by" --max-completion 768 "$@" >"$run/stdout.txt" 2>&1 || rc=$?
touch "$run/.stop"
if [ -n "$sampler" ]; then wait "$sampler" || echo "trl_run.sh: the sampler failed (sampler.log)"; fi
rm -f "$run/.stop"
[ -f "$run/samples.csv" ] && gzip -f "$run/samples.csv"
stamp "training done (exit $rc)"
tail -5 "$run/stdout.txt"
if [ -s "$run/trace.jsonl" ]; then
    "$eerl_bin" analyze --forward-test "$run/trace.jsonl" >"$run/forward-test.txt" 2>&1 ||
        echo "trl_run.sh: eerl analyze --forward-test failed (forward-test.txt)"
    "$py" tools/h200/trl_summary.py "$run" --plot "$run/eerl-vs-zeus.png" \
        --json "$run/summary.json" >"$run/summary.md" 2>"$run/summary.err" ||
        { echo "trl_run.sh: trl_summary.py failed:"; cat "$run/summary.err"; }
fi
# The phase-mark benchmark on the real driver, read-only (the meter only reads; nothing here
# changes a clock or a power limit): what a mark costs the caller's thread, and the accuracy.
if [ "$bench" = 1 ] && [ -n "${bench_bin:-}" ] && [ -x "$bench_bin" ]; then
    blim=$((secs - 8 - ($(date +%s) - t0)))
    [ "$blim" -gt "$bench_s" ] && blim=$bench_s
    if [ "$blim" -gt 5 ]; then
        timeout -k 2 "$blim" "$bench_bin" --marks --real --updates "${TRL_BENCH_UPDATES:-4}" \
            >"$run/bench-meter-marks.txt" 2>&1 ||
            echo "trl_run.sh: bench_meter --marks --real failed or ran out of time (exit $?)" \
                >>"$run/bench-meter-marks.txt"
        stamp "mark benchmark done"
    else
        echo "trl_run.sh: no time left for the mark benchmark" >"$run/bench-meter-marks.txt"
    fi
elif [ "$bench" = 1 ]; then
    echo "trl_run.sh: no bench_meter to run ('${bench_bin:-}': RL_BUILT=1 needs BENCH_METER)" \
        >"$run/bench-meter-marks.txt"
fi
tar -C "$work" -czf "$out/trl-grpo.tar.gz" trl-grpo
for f in summary.md forward-test.txt eerl-vs-zeus.png bench-meter-marks.txt; do
    [ -f "$run/$f" ] && cp "$run/$f" "$out/$f"
done
stamp "packed into $out"
if [ -f "$run/summary.md" ]; then
    sed -n '/^| pair /,/^$/p' "$run/summary.md"
    sed -n '/^| what /,/^$/p' "$run/summary.md"
    grep "^eerl's own timing" "$run/summary.md" || true
fi
[ -f "$run/forward-test.txt" ] && sed -n '/pooled/,$p' "$run/forward-test.txt"
[ -f "$run/bench-meter-marks.txt" ] && cat "$run/bench-meter-marks.txt"
echo "trl_run.sh: trl_grpo.py exit $rc, $(wc -l <"$run/log.jsonl" 2>/dev/null || echo 0) updates"
exit $rc
