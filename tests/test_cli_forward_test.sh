#!/usr/bin/env bash
# `eerl analyze --forward-test` (the paper's Appendix B): on a hand-made trace whose phase times
# are exact power laws of the token counts the token-work model's error is ~0 and the constant
# reference's medians and 90th percentiles equal an independent computation here (awk); governor
# updates split by candidate updates are bridged (and counted as gaps), or refused with
# --consecutive; refused observations and warm-up are left out; on the simulated cluster
# (`eerl sim --strategy governor`) the token-work model beats the constant reference by at least
# half in throughput and also in energy (colocated, disaggregated, drained); JSON keys as
# documented; every bad input names its value and exits non-zero.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1

# jq -e on a file, failing with the file's text.
expect_jq() {
    jq -e "$2" "$1" >/dev/null || fail "$3: jq '$2' false on: $(head -c 2000 "$1")"
}

# A hand-made colocated trace: generation time 0.001 (1 + G) s, training 0.0004 (1 + N) s,
# refit 1 s; energies at constant power per phase. Eq. 2 (log time on log(1 + x)) fits this
# exactly. $1: file, $2: number of updates, $3: "gap" for updates 17-19 at 1500 MHz generation
# and one refused (NaN energy) governor update at the end.
make_trace() {
    awk -v nu="$2" -v gap="${3:-}" 'BEGIN {
        print "{\"type\":\"header\",\"format\":\"eerl-trace\",\"version\":1,\"mode\":\"colocated\"," \
              "\"governor_peak_mhz\":1980,\"clocks_mhz\":[1980,1500,1000]}"
        print "{\"type\":\"run\",\"observe_only\":true,\"role\":\"governor\",\"seed\":7}"
        for (u = 1; u <= nu; u++) {
            G = 20000 + 1000 * ((u * 7) % 11) + 37 * u
            N = 0.8 * G + 500 * ((u * 3) % 5)
            L = 200 + 50 * ((u * 5) % 7)
            tg = 0.001 * (1 + G); tt = 0.0004 * (1 + N)
            eg = 500 * tg; et = 650 * tt
            T = tg + tt + 1; E = eg + et + 100
            gen = "\"governor\""
            if (gap == "gap" && u >= 17 && u <= 19)
                gen = 1500
            Es = sprintf("%.17g", E)
            if (gap == "gap" && u == nu)
                Es = "\"nan\""
            printf "{\"type\":\"update\",\"update\":%d,\"work\":{\"G\":%.17g,\"N\":%.17g,\"L\":%.17g}," \
                   "\"time_s\":%.17g,\"energy_j\":%s,\"phases\":{\"generation\":{\"time_s\":%.17g," \
                   "\"energy_j\":%.17g},\"training\":{\"time_s\":%.17g,\"energy_j\":%.17g}," \
                   "\"refit\":{\"time_s\":1.0,\"energy_j\":100.0}},\"setting\":{\"observed\":" \
                   "{\"gen_mhz\":%s,\"train_mhz\":\"governor\"}}}\n",
                   u, G, N, L, T, Es, tg, eg, tt, et, gen
        }
    }' >"$1"
}

# The constant reference computed independently from the trace (updates 2.., fit/predict/step):
# prints "tput_median tput_p90 energy_median energy_p90" in percent.
constant_ref() {
    jq -r 'select(.type == "update" and .update >= 2) | "\(.work.N) \(.time_s) \(.energy_j)"' "$1" |
        awk -v k="$2" -v m="$3" -v s="$4" '
        { n++; q[n] = $1 / $2; e[n] = $3 }
        function abs(x) { return x < 0 ? -x : x }
        function sortq(a, c,    i, j, t) {
            for (i = 2; i <= c; i++)
                for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        }
        function quant(a, c, p,    pos, k0, f) {
            pos = p * (c - 1); k0 = int(pos); f = pos - k0
            return k0 + 1 < c ? a[k0 + 1] + f * (a[k0 + 2] - a[k0 + 1]) : a[k0 + 1]
        }
        END {
            c = 0
            for (st = k; st + m <= n; st += s) {
                qm = 0; em = 0
                for (i = st - k + 1; i <= st; i++) { qm += q[i]; em += e[i] }
                qm /= k; em /= k
                for (i = st + 1; i <= st + m; i++) {
                    c++; tq[c] = 100 * abs(qm / q[i] - 1); te[c] = 100 * abs(em / e[i] - 1)
                }
            }
            sortq(tq, c); sortq(te, c)
            printf "%.10g %.10g %.10g %.10g\n", quant(tq, c, 0.5), quant(tq, c, 0.9),
                quant(te, c, 0.5), quant(te, c, 0.9)
        }'
}

# Relative closeness of two numbers (1e-7).
close_to() {
    awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; s = b < 0 ? -b : b;
        exit !(d <= 1e-7 * s + 1e-9) }'
}

# ---- the hand-made trace: exact answers ----
make_trace "$tmp/exact.jsonl" 27
"$EERL_BIN" analyze --forward-test --json "$tmp/exact.jsonl" >"$tmp/exact.json" 2>"$tmp/err"
expect_rc 0 $? "exact trace"
# 26 governor updates from update 2: blocks start at 15, 18, 21 -> 3 blocks, 9 predictions.
expect_jq "$tmp/exact.json" '.traces[0].governor_updates == 26 and .traces[0].warmup == 1 and
    .traces[0].gaps == 0 and .pooled.blocks == 3 and .pooled.predictions == 9' "exact counts"
expect_jq "$tmp/exact.json" '.pooled.token_work | .throughput_median_pct < 1e-6 and
    .throughput_p90_pct < 1e-6 and .energy_median_pct < 1e-6 and .energy_p90_pct < 1e-6' \
    "exact: token-work ~0"
read -r cq cq9 ce ce9 < <(constant_ref "$tmp/exact.jsonl" 15 3 3)
got=$(jq -r '.pooled.constant | "\(.throughput_median_pct) \(.throughput_p90_pct) \(.energy_median_pct) \(.energy_p90_pct)"' "$tmp/exact.json")
read -r gq gq9 ge ge9 <<<"$got"
for pair in "$gq $cq" "$gq9 $cq9" "$ge $ce" "$ge9 $ce9"; do
    # shellcheck disable=SC2086
    close_to $pair || fail "exact: constant reference $got, expected $cq $cq9 $ce $ce9"
done
# The constant reference is really wrong here (the work varies by tens of percent).
awk -v a="$cq" 'BEGIN { exit !(a > 1) }' || fail "exact: constant error $cq% too small to test"
# Other fit/predict/step: fit 6, predict 2, step 4.
"$EERL_BIN" analyze --forward-test --fit 6 --predict 2 --step 4 --json "$tmp/exact.jsonl" \
    >"$tmp/exact2.json"
expect_rc 0 $? "exact trace, fit 6 predict 2 step 4"
read -r cq cq9 ce ce9 < <(constant_ref "$tmp/exact.jsonl" 6 2 4)
read -r gq gq9 ge ge9 < <(jq -r '.pooled.constant | "\(.throughput_median_pct) \(.throughput_p90_pct) \(.energy_median_pct) \(.energy_p90_pct)"' "$tmp/exact2.json")
for pair in "$gq $cq" "$gq9 $cq9" "$ge $ce" "$ge9 $ce9"; do
    # shellcheck disable=SC2086
    close_to $pair || fail "fit 6/2/4: constant reference $gq $gq9 $ge $ge9, expected $cq $cq9 $ce $ce9"
done
# (26 - 6 - 2) / 4 + 1 = 5 blocks of 2.
expect_jq "$tmp/exact2.json" '.pooled.blocks == 5 and .pooled.predictions == 10 and
    .forward_test == {"fit": 6, "predict": 2, "step": 4, "consecutive": false, "from": 2}' \
    "fit 6/2/4 counts"
# --from 5: updates 1-4 are warm-up, 23 used, (23 - 18) / 3 + 1 = 2 blocks.
"$EERL_BIN" analyze --forward-test --from 5 --json "$tmp/exact.jsonl" >"$tmp/from.json"
expect_rc 0 $? "--from 5"
expect_jq "$tmp/from.json" '.traces[0] | .warmup == 4 and .governor_updates == 23 and
    .blocks == 2' "--from 5 counts"
"$EERL_BIN" analyze --forward-test "$tmp/exact.jsonl" >"$tmp/out"
expect_rc 0 $? "exact table"
for s in "colocated mode, 1 trace; fit 15, predict 3, step 3 governor updates from update 2 on" \
    "26 governor updates used of 27" \
    "constant" "token-work" "pooled over 1 trace"; do
    expect_in "$tmp/out" "$s" "exact table"
done

# ---- candidate updates in between, a refused observation ----
make_trace "$tmp/gap.jsonl" 27 gap
"$EERL_BIN" analyze --forward-test --json "$tmp/gap.jsonl" >"$tmp/gap.json"
expect_rc 0 $? "gap trace"
# Updates 2-16 and 20-26 are used (22), 17-19 are not the governor, 27 is refused. Blocks start at
# 15 and 18 of the 22: both fit or predict across the gap.
expect_jq "$tmp/gap.json" '.traces[0] | .governor_updates == 22 and .not_governor == 3 and
    .refused == 1 and .gaps == 1 and .longest_consecutive == 15 and .blocks == 2 and
    .gap_blocks == 2' "gap counts"
expect_jq "$tmp/gap.json" '.pooled.token_work.throughput_p90_pct < 1e-6' "gap: token-work ~0"
"$EERL_BIN" analyze --forward-test --consecutive "$tmp/gap.jsonl" >"$tmp/out" 2>"$tmp/err"
expect_rc 1 $? "gap trace, --consecutive"
expect_in "$tmp/err" "has 22 usable governor updates, at most 15 of them in a row" "consecutive"
expect_in "$tmp/err" "3 under other settings, 1 refused" "consecutive"
"$EERL_BIN" analyze --forward-test --consecutive --fit 10 --predict 3 --json "$tmp/gap.jsonl" \
    >"$tmp/gap2.json"
expect_rc 0 $? "gap trace, --consecutive --fit 10"
# Only the 15-update stretch holds a block of 13 (start 10 of 15): 1 block, no gap.
expect_jq "$tmp/gap2.json" '.pooled.blocks == 1 and .pooled.gap_blocks == 0 and
    .forward_test.consecutive == true' "consecutive blocks"

# ---- the simulated cluster: the token-work model beats the constant reference ----
for mode in colocated disaggregated drained; do
    "$EERL_BIN" sim --mode "$mode" --strategy governor --seeds 2 --updates 60 \
        --trace "$tmp/$mode" >/dev/null 2>&1
    expect_rc 0 $? "eerl sim --mode $mode --strategy governor"
    "$EERL_BIN" analyze --forward-test --json "$tmp/$mode"/*-governor.jsonl >"$tmp/$mode.json"
    expect_rc 0 $? "forward test $mode"
    # 59 governor updates per run: (59 - 18) / 3 + 1 = 14 blocks each.
    expect_jq "$tmp/$mode.json" '.mode == "'"$mode"'" and (.traces | length == 2) and
        .pooled.traces == 2 and .pooled.blocks == 28 and .pooled.predictions == 84' \
        "$mode counts"
    expect_jq "$tmp/$mode.json" '.pooled | .token_work.throughput_median_pct <=
        0.5 * .constant.throughput_median_pct and .token_work.energy_median_pct <
        .constant.energy_median_pct and .constant.throughput_median_pct > 0' \
        "$mode: token-work beats the constant reference"
    expect_jq "$tmp/$mode.json" '[.traces[], .pooled] | all(.constant, .token_work |
        has("throughput_median_pct") and has("throughput_p90_pct") and
        has("energy_median_pct") and has("energy_p90_pct"))' "$mode JSON keys"
done
# Controller traces of the governor strategy count as governor updates too.
"$EERL_BIN" analyze --forward-test "$tmp/colocated"/*.jsonl >"$tmp/out"
expect_rc 0 $? "governor and controller traces"
expect_in "$tmp/out" "pooled over 4 traces" "four traces"

# ---- bad input ----
"$EERL_BIN" sim --mode colocated --strategy governor --seeds 1 --updates 17 --trace "$tmp/short" \
    >/dev/null 2>&1
"$EERL_BIN" analyze --forward-test "$tmp/short/seed1-governor.jsonl" >"$tmp/out" 2>"$tmp/err"
expect_rc 1 $? "too few updates"
expect_in "$tmp/err" "seed1-governor.jsonl has 16 usable governor updates (of 17 update lines: 1 warm-up" \
    "too few updates"
expect_in "$tmp/err" "needs at least --fit 15 + --predict 3 = 18" "too few updates"
"$EERL_BIN" analyze --forward-test --fit 50 --predict 10 "$tmp/exact.jsonl" >"$tmp/out" 2>"$tmp/err"
expect_rc 1 $? "fit too long"
expect_in "$tmp/err" "has 26 usable governor updates" "fit too long"
expect_in "$tmp/err" "--fit 50 + --predict 10 = 60" "fit too long"
"$EERL_BIN" analyze --forward-test --fit 1 "$tmp/exact.jsonl" >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "--fit 1"
expect_in "$tmp/err" "--fit 1 is out of range (2-100000)" "--fit 1"
"$EERL_BIN" analyze --forward-test --predict 0 "$tmp/exact.jsonl" >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "--predict 0"
expect_in "$tmp/err" "--predict 0 is out of range (1-100000)" "--predict 0"
"$EERL_BIN" analyze --forward-test --step 3x "$tmp/exact.jsonl" >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "--step 3x"
expect_in "$tmp/err" "--step '3x' is not a non-negative integer" "--step 3x"
"$EERL_BIN" analyze --forward-test --fit -5 "$tmp/exact.jsonl" >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "--fit -5"
expect_in "$tmp/err" "--fit '-5' is not a non-negative integer" "--fit -5"
"$EERL_BIN" analyze --forward-test "$tmp/exact.jsonl" --fit >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "--fit without value"
expect_in "$tmp/err" "--fit needs a value" "--fit without value"
"$EERL_BIN" analyze --fit 10 "$tmp/exact.jsonl" >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "--fit without --forward-test"
expect_in "$tmp/err" "go with --forward-test" "--fit without --forward-test"
"$EERL_BIN" analyze --forward-test --from x1 "$tmp/exact.jsonl" >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "--from x1"
expect_in "$tmp/err" "--from 'x1' is not a non-negative integer" "--from x1"
"$EERL_BIN" analyze --forward-test >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "no traces"
expect_in "$tmp/err" "no traces given" "no traces"
"$EERL_BIN" analyze --forward-test "$tmp/exact.jsonl" "$tmp/drained/seed1-governor.jsonl" \
    >"$tmp/out" 2>"$tmp/err"
expect_rc 1 $? "mixed modes"
expect_in "$tmp/err" "is a drained run but" "mixed modes"
"$EERL_BIN" analyze --forward-test "$tmp/nope.jsonl" >"$tmp/out" 2>"$tmp/err"
expect_rc 1 $? "missing file"
expect_in "$tmp/err" "cannot open trace '$tmp/nope.jsonl'" "missing file"

[ $fails -eq 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
echo "ok"
