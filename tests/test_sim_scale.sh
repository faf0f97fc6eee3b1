#!/usr/bin/env bash
# `eerl sim` on large allocations: the paper's Nemotron-Super-49B allocations of Table 1 (H100:
# colocated 64, disaggregated, drained and in-flight 16/32 and 16/64; GB200: colocated 32,
# disaggregated 8/16) and 1024 GPUs (128 nodes of 8) in every mode, each one seed at a short
# length. Each run succeeds (eerl sim itself fails a run whose session locked a clock other than
# the twin ran, or left a clock locked), reports the allocation it was asked for, and its
# controller trace names every GPU of both pools and replays to the same decisions.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1

# model, GPU model, mode, allocation, size, updates (more than the mode's calibration)
configs=(
    "nemotron-super-49b h100 colocated 64 S 25"
    "nemotron-super-49b h100 disaggregated 16/32 M 25"
    "nemotron-super-49b h100 disaggregated 16/64 M 25"
    "nemotron-super-49b h100 drained 16/32 S 40"
    "nemotron-super-49b h100 drained 16/64 S 40"
    "nemotron-super-49b h100 inflight 16/32 S 50"
    "nemotron-super-49b h100 inflight 16/64 S 50"
    "nemotron-super-49b gb200 colocated 32 S 25"
    "nemotron-super-49b gb200 disaggregated 8/16 S 25"
    "qwen3-30b-a3b h100 colocated 1024 S 25"
    "qwen3-30b-a3b h100 disaggregated 256/768 S 25"
    "qwen3-30b-a3b h100 drained 512/512 S 40"
    "qwen3-30b-a3b h100 inflight 256/768 S 50"
)
n=0
for c in "${configs[@]}"; do
    set -- $c
    model=$1 gpu=$2 mode=$3 alloc=$4 size=$5 updates=$6
    n=$((n + 1))
    what="$model $gpu $mode $alloc"
    dir="$tmp/run$n"
    "$EERL_BIN" sim --model "$model" --gpu-model "$gpu" --mode "$mode" --alloc "$alloc" \
        --size "$size" --updates "$updates" --seeds 1 --trace "$dir" --json \
        >"$tmp/out.json" 2>"$tmp/err"
    rc=$?
    expect_rc 0 $rc "$what"
    [ $rc -eq 0 ] || { sed 's/^/    /' "$tmp/err" >&2; continue; }
    ng=${alloc%/*}
    nt=0
    [ "$alloc" = "$ng" ] || nt=${alloc#*/}
    jq -e --arg a "$alloc" --argjson ng "$ng" --argjson nt "$nt" --argjson u "$updates" \
        '.alloc == $a and .n_gen == $ng and .n_train == $nt and .updates == $u and
         (.saving_pct | type == "number") and (.dq_pct | type == "number")' \
        "$tmp/out.json" >/dev/null ||
        fail "$what: JSON: $(jq -c '{alloc,n_gen,n_train,updates,saving_pct,dq_pct}' "$tmp/out.json")"
    # The run line names every GPU of each pool (colocated: the one set, twice).
    t="$dir/seed1-controller.jsonl"
    want_t=$nt
    [ "$mode" = colocated ] && want_t=$ng
    jq -e -s --argjson ng "$ng" --argjson nt "$want_t" 'map(select(.type == "run"))[0] |
        (.pools.generation | length) == $ng and (.pools.training | length) == $nt and
        (.pools.generation | unique | length) == $ng' "$t" >/dev/null ||
        fail "$what: pools in the trace's run line: $(jq -c 'select(.type == "run") |
            .pools | map_values(length)' "$t")"
    "$EERL_BIN" replay "$t" >"$tmp/replay" 2>&1 ||
        { fail "$what: eerl replay"; tail -5 "$tmp/replay" | sed 's/^/    /' >&2; }
    grep -q " 0 mismatches" "$tmp/replay" || fail "$what: replay: $(tail -1 "$tmp/replay")"
done

[ $fails -eq 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
echo "ok"
