#!/usr/bin/env bash
# `eerl sweep` on the simulated cluster: the CSV echoes each pair as given (Gov stays Gov) with
# dq/saving/seeds, the JSON carries the same figures, matched seeds make a run reproducible,
# lowering clocks in colocated mode costs throughput and saves energy, and every bad input
# (unknown model/GPU/mode/size, an allocation that does not fit the mode, an unsupported clock,
# a malformed pair list, zero seeds) names the value and exits with status 2.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1

base=(sweep --model qwen3-30b-a3b --gpu h100 --mode colocated --alloc 32 --size M)

# A good sweep.
"$EERL_BIN" "${base[@]}" --pairs 1800/1500,Gov/1200,1200/1200 --seeds 2 >"$tmp/out" 2>"$tmp/err"
expect_rc 0 $? "good sweep"
expect_in "$tmp/out" "gen_mhz,train_mhz,dq_pct,saving_pct,seeds" "CSV header"
expect_in "$tmp/out" "Gov,1200," "Gov echoed as given"
expect_in "$tmp/err" "seed" "progress on stderr"
[ "$(wc -l <"$tmp/out")" -eq 4 ] || fail "one line per pair plus the header"
# 1200/1200 is slower than the governor and saves energy.
awk -F, '$1=="1200" { if (!($3 < -2 && $4 > 5)) exit 1 }' "$tmp/out" ||
    fail "1200/1200 should cost throughput and save energy: $(cat "$tmp/out")"

# Reproducible: same seeds, same numbers; JSON has the same figures.
"$EERL_BIN" "${base[@]}" --pairs 1800/1500,Gov/1200,1200/1200 --seeds 2 >"$tmp/out2" 2>/dev/null
cmp -s "$tmp/out" "$tmp/out2" || fail "same seeds gave different results"
"$EERL_BIN" "${base[@]}" --pairs Gov/1200 --seeds 2 --json >"$tmp/json" 2>/dev/null
expect_rc 0 $? "json sweep"
want=$(awk -F, '$1=="Gov" {print $3}' "$tmp/out")
expect_in "$tmp/json" "\"gen_mhz\":\"Gov\",\"train_mhz\":\"1200\",\"dq_pct\":$want," "JSON figures"

# Disaggregated and asynchronous modes run with pool allocations.
for m in disaggregated drained inflight; do
    "$EERL_BIN" sweep --model nemotron-super-49b --gpu h100 --mode $m --alloc 16/64 --size S \
        --pairs 1830/810 --seeds 1 --updates 3-8 >"$tmp/m" 2>/dev/null
    expect_rc 0 $? "mode $m"
    expect_in "$tmp/m" "1830,810," "mode $m output"
done

# Bad input: message naming the value, exit status 2.
bad() { # WHAT TEXT args...
    local what=$1 text=$2
    shift 2
    "$EERL_BIN" "$@" >"$tmp/bo" 2>"$tmp/be"
    expect_rc 2 $? "$what"
    expect_in "$tmp/be" "$text" "$what message"
}
p=(--pairs 1800/1500)
bad "unknown model" "unknown model 'llama'; valid models: qwen3-30b-a3b, nemotron-super-49b" \
    sweep --model llama --gpu h100 --mode colocated --alloc 32 --size M "${p[@]}"
bad "unknown gpu" "unknown GPU 'a100'; valid GPUs: h100, gb200, h200" \
    sweep --model qwen3-30b-a3b --gpu a100 --mode colocated --alloc 32 --size M "${p[@]}"
bad "unknown mode" "unknown mode 'async'; valid modes: colocated, disaggregated" \
    sweep --model qwen3-30b-a3b --gpu h100 --mode async --alloc 32 --size M "${p[@]}"
bad "unknown size" "unknown size 'XL'; valid sizes: S, M, L" \
    sweep --model qwen3-30b-a3b --gpu h100 --mode colocated --alloc 32 --size XL "${p[@]}"
bad "pools in colocated" "allocation '8/32' does not fit mode colocated" \
    sweep --model qwen3-30b-a3b --gpu h100 --mode colocated --alloc 8/32 --size M "${p[@]}"
bad "one count in drained" "allocation '32' does not fit mode drained" \
    sweep --model qwen3-30b-a3b --gpu h100 --mode drained --alloc 32 --size M "${p[@]}"
bad "malformed alloc" "--alloc '8/x' is malformed" \
    sweep --model qwen3-30b-a3b --gpu h100 --mode drained --alloc 8/x --size M "${p[@]}"
bad "unsupported clock" "1234 MHz is not a clock h100 supports" \
    "${base[@]}" --pairs 1800/1500,1234/1200
bad "malformed pairs" "pair 2 ('1800-1500') is malformed" \
    "${base[@]}" --pairs Gov/Gov,1800-1500
bad "trailing comma" "ends with a comma" "${base[@]}" --pairs 1800/1500,
bad "zero seeds" "--seeds 0" "${base[@]}" "${p[@]}" --seeds 0
bad "bad updates" "--updates '25-5' is malformed" "${base[@]}" "${p[@]}" --updates 25-5
bad "missing pairs" "missing --pairs" "${base[@]}"
bad "unknown option" "unknown option '--frobnicate'" "${base[@]}" "${p[@]}" --frobnicate x
bad "bad params file" "no usable preset" "${base[@]}" "${p[@]}" --params /dev/null
# A directory is said to be one (it once read as "Cannot allocate memory").
"$EERL_BIN" "${base[@]}" "${p[@]}" --params "$tmp" >"$tmp/bo" 2>"$tmp/be"
expect_rc 1 $? "--params names a directory"
expect_in "$tmp/be" "cannot read parameter file '$tmp': Is a directory" "--params directory message"

# eerl sim's defaults: only --pairs is needed; --gpu-model names the GPU model, --gpu (its
# earlier name) still works
"$EERL_BIN" sweep --pairs 1800/1500 --seeds 1 --updates 5-8 >"$tmp/d1" 2>/dev/null
expect_rc 0 $? "sweep with only --pairs"
"$EERL_BIN" sweep --model qwen3-30b-a3b --gpu-model h100 --mode disaggregated --alloc 8/32 \
    --size M --pairs 1800/1500 --seeds 1 --updates 5-8 >"$tmp/d2" 2>/dev/null
"$EERL_BIN" sweep --gpu h100 --pairs 1800/1500 --seeds 1 --updates 5-8 >"$tmp/d3" 2>/dev/null
cmp -s "$tmp/d1" "$tmp/d2" || fail "sweep defaults are not eerl sim's: $(cat "$tmp/d1") vs $(cat "$tmp/d2")"
cmp -s "$tmp/d1" "$tmp/d3" || fail "sweep --gpu (deprecated alias) differs from --gpu-model"
"$EERL_BIN" sweep --mode colocated --pairs 1800/1500 --seeds 1 --updates 5-8 >"$tmp/d4" 2>/dev/null
expect_rc 0 $? "sweep colocated takes eerl sim's colocated allocation (32)"
# --workload: eerl sim's drift scenarios. A sweep of the oracle's own setting over a collapsing
# run reads what eerl sim's oracle reads for it (same seeds, same updates; within 0.05 points:
# the oracle holds the setting on the governor run's recorded batches, the sweep runs the twin
# afresh, and in this work they differ by 0.01-0.02, in steady work not at all), the steady run
# differs, and a bad scenario or a scenario option of another one is refused, named.
"$EERL_BIN" sim --mode colocated --size M --updates 60 --seeds 2 --strategy oracle --divergence 0 \
    --workload collapsing --json >"$tmp/o.json" 2>/dev/null
expect_rc 0 $? "sim --strategy oracle --workload collapsing"
og=$(jq -r '.oracle.setting.gen_mhz' "$tmp/o.json")
ot=$(jq -r '.oracle.setting.train_mhz' "$tmp/o.json")
wsw=(sweep --mode colocated --size M --pairs "$og/$ot" --seeds 2 --updates 2-60 --divergence 0 --json)
"$EERL_BIN" "${wsw[@]}" --workload collapsing >"$tmp/wc.json" 2>/dev/null
expect_rc 0 $? "sweep --workload collapsing"
"$EERL_BIN" "${wsw[@]}" >"$tmp/ws.json" 2>/dev/null
want=$(jq -r '"\(.oracle.dq_pct * 100 | round / 100) \(.oracle.saving_pct * 100 | round / 100)"' "$tmp/o.json")
got=$(jq -r '.pairs[0] | "\(.dq_pct) \(.saving_pct)"' "$tmp/wc.json")
awk -v w="$want" -v g="$got" 'BEGIN { split(w, a, " "); split(g, b, " ")
    exit !((a[1] - b[1])^2 < 0.0025 && (a[2] - b[2])^2 < 0.0025) }' ||
    fail "sweep --workload collapsing of the oracle's $og/$ot reads $got, eerl sim's oracle $want"
jq -e '.workload | startswith("collapsing")' "$tmp/wc.json" >/dev/null ||
    fail "sweep --json does not name its workload: $(jq -c .workload "$tmp/wc.json")"
cmp -s <(jq -c .pairs "$tmp/wc.json") <(jq -c .pairs "$tmp/ws.json") &&
    fail "sweep --workload collapsing reads as the steady run: $(jq -c .pairs "$tmp/ws.json")"
bad "unknown workload" "unknown workload scenario 'bogus'" "${base[@]}" "${p[@]}" --workload bogus
bad "option of another workload" "--growth belongs to --workload growing" "${base[@]}" "${p[@]}" \
    --workload steady --growth 2

"$EERL_BIN" sim --gpu-model h200 --seeds 1 --updates 20 --json >"$tmp/s.json" 2>/dev/null
expect_rc 0 $? "sim --gpu-model"
jq -e '.gpu == "h200"' "$tmp/s.json" >/dev/null || fail "sim --gpu-model h200: $(jq -c .gpu "$tmp/s.json")"
# Each help text whole into a file first: grep -q stops reading at its match, and under pipefail
# the writer's SIGPIPE would fail the pipeline once the text outgrows the pipe's first read.
"$EERL_BIN" sim --help >"$tmp/sim-help" 2>&1
expect_in "$tmp/sim-help" "--json: one JSON object" "sim --help (describes --json)"
"$EERL_BIN" devices --help >"$tmp/devices-help" 2>&1
expect_in "$tmp/devices-help" "--socket PATH" "devices --help (names --socket)"

[ "$fails" -eq 0 ] && echo "test_cli_sweep: all passed"
exit $((fails > 0))
