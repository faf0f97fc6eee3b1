#!/usr/bin/env bash
# `eerl analyze TRACE` on one trace: what eerl saved, estimated from that trace alone
# (core/estimate.c; docs/runtime.md "What eerl saved"). On the twin (virtual time, fixed seeds:
# deterministic) the controller trace's estimate lands within the issue's bounds of the exact
# figure its governor pair gives, its 90% interval holds the exact saving, and the observe-only
# trace's interval holds 0 (the self-check). The session's closing line is the same aggregator's
# total; a trace without the per-update records (format 1) gets them recomputed to the same
# figure. Every mode at the paper's length; the asynchronous ones judged one update late. On
# drifting work (a dataset switch, responses collapsing) the interval still holds the exact
# saving. The committed H200 observe-only runs hold 0 within a narrow interval; the TRL run
# whose generation the work does not explain cannot be judged.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"
: "${EERL_SOURCE_DIR:?EERL_SOURCE_DIR must name the source tree}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1

# mode alloc updates [workload]: the paper's lengths, 3 seeds each
check_mode() {
    local mode=$1 alloc=$2 upd=$3 d=$tmp/$1${4:+-$4}
    "$EERL_BIN" sim --mode "$mode" --alloc "$alloc" --updates "$upd" --seeds 3 --trace "$d" \
        ${4:+--workload "$4"} --json >"$d.json" 2>"$d.err"
    expect_rc 0 $? "eerl sim $mode"
    for s in 1 2 3; do
        "$EERL_BIN" analyze --json "$d/seed$s-controller.jsonl" >"$d/c$s.json" 2>&1
        expect_rc 0 $? "analyze $mode seed $s controller"
        "$EERL_BIN" analyze --json "$d/seed$s-governor.jsonl" >"$d/g$s.json" 2>&1
        expect_rc 0 $? "analyze $mode seed $s governor"
        jq -e --slurpfile sim "$d.json" --argjson s "$s" '
            ($sim[0].seeds[] | select(.seed == $s)) as $x | .estimate as $e |
            $e.judged and $e.judged_updates > 50 and
            (($e.saving_pct - $x.saving_pct) | fabs) <= 1.0 and
            (($e.throughput_change_pct - $x.dq_pct) | fabs) <= 0.75 and
            $e.saving_ci_pct[0] <= $x.saving_pct and $x.saving_pct <= $e.saving_ci_pct[1]' \
            "$d/c$s.json" >/dev/null ||
            fail "$mode seed $s: the estimate misses the exact figure: $(cat "$d/c$s.json")"
        jq -e '.estimate | .judged and .saving_ci_pct[0] <= 0 and 0 <= .saving_ci_pct[1]' \
            "$d/g$s.json" >/dev/null ||
            fail "$mode seed $s: the observe-only trace's interval does not hold 0: $(cat "$d/g$s.json")"
        # the session's closing line: the same total the records sum to
        tail -n 1 "$d/seed$s-controller.jsonl" | jq -e --slurpfile a "$d/c$s.json" '
            .type == "estimate" and ((.saving_pct - $a[0].estimate.saving_pct) | fabs) < 1e-6' \
            >/dev/null || fail "$mode seed $s: the closing estimate line differs from analyze"
    done
}
check_mode colocated 32 107
check_mode disaggregated 8/32 93
# the asynchronous modes: each update judged one update late, on the batch its generation pool
# made (the next update's counts); the closing line counts the last one provisionally
check_mode drained 8/24 175
check_mode inflight 16/32 335
# drained seed 8: its calibration's governor updates ran 1.3% faster than its pair's (the
# twin's noise); the generation level from every update whose generation ran at the governor
# (pairs that slow only the training pool) keeps the throughput within the bound
d=$tmp/drained-s8
"$EERL_BIN" sim --mode drained --alloc 8/24 --updates 175 --seeds 1 --first-seed 8 --trace "$d" \
    --json >"$d.json" 2>"$d.err"
expect_rc 0 $? "eerl sim drained seed 8"
"$EERL_BIN" analyze --json "$d/seed8-controller.jsonl" >"$d/c8.json" 2>&1
expect_rc 0 $? "analyze drained seed 8 controller"
jq -e --slurpfile sim "$d.json" '($sim[0].seeds[] | select(.seed == 8)) as $x | .estimate as $e |
    $e.judged and (($e.throughput_change_pct - $x.dq_pct) | fabs) <= 0.75 and
    $e.throughput_ci_pct[0] <= $x.dq_pct and $x.dq_pct <= $e.throughput_ci_pct[1]' \
    "$d/c8.json" >/dev/null ||
    fail "drained seed 8: the throughput misses the exact figure: $(cat "$d/c8.json")"
for m in drained inflight; do
    jq -e -s '[.[] | select(.type == "update" and .estimate)] |
        all(.estimate.update == .update - 1)' "$tmp/$m/seed1-controller.jsonl" >/dev/null ||
        fail "$m: an update line's record is not the update before it"
done

# drifting work, a dataset switch (token counts x3 at mid-run): the interval widens with the
# distance from the updates fitted and holds the exact saving, the observe-only trace's holds 0
d=$tmp/step
"$EERL_BIN" sim --mode disaggregated --alloc 8/32 --updates 93 --seeds 2 --workload step \
    --step-factor 3 --trace "$d" --json >"$d.json" 2>"$d.err"
expect_rc 0 $? "eerl sim step"
for s in 1 2; do
    "$EERL_BIN" analyze --json "$d/seed$s-controller.jsonl" >"$d/c$s.json" 2>&1
    expect_rc 0 $? "analyze step seed $s controller"
    "$EERL_BIN" analyze --json "$d/seed$s-governor.jsonl" >"$d/g$s.json" 2>&1
    expect_rc 0 $? "analyze step seed $s governor"
    jq -e --slurpfile sim "$d.json" --argjson s "$s" '
        ($sim[0].seeds[] | select(.seed == $s)) as $x | .estimate as $e |
        ($e.judged or ($e.why | test("left the range"))) and
        $e.saving_ci_pct[0] <= $x.saving_pct and $x.saving_pct <= $e.saving_ci_pct[1]' \
        "$d/c$s.json" >/dev/null ||
        fail "step seed $s: the interval misses the exact saving: $(cat "$d/c$s.json")"
    jq -e '.estimate | .saving_ci_pct[0] <= 0 and 0 <= .saving_ci_pct[1]' "$d/g$s.json" \
        >/dev/null || fail "step seed $s: the observe-only interval does not hold 0"
done

# responses collapsing to 0.4 of their length while the calibration runs (the longest response
# pinned at the limit through it, then falling): the interval holds the exact saving
d=$tmp/collapsing
"$EERL_BIN" sim --mode colocated --alloc 32 --updates 107 --seeds 3 --workload collapsing \
    --trace "$d" --json >"$d.json" 2>"$d.err"
expect_rc 0 $? "eerl sim collapsing"
for s in 1 2 3; do
    "$EERL_BIN" analyze --json "$d/seed$s-controller.jsonl" >"$d/c$s.json" 2>&1
    expect_rc 0 $? "analyze collapsing seed $s controller"
    jq -e --slurpfile sim "$d.json" --argjson s "$s" '
        ($sim[0].seeds[] | select(.seed == $s)) as $x | .estimate as $e |
        $e.saving_ci_pct[0] <= $x.saving_pct and $x.saving_pct <= $e.saving_ci_pct[1]' \
        "$d/c$s.json" >/dev/null ||
        fail "collapsing seed $s: the interval misses the exact saving: $(cat "$d/c$s.json")"
done

# a trace without the records (format 1): recomputed through the same code, the same figure,
# in a synchronous and an asynchronous mode
for m in colocated inflight; do
    c=$tmp/$m/seed1-controller.jsonl
    jq -c 'select(.type != "estimate") | del(.estimate) |
           if .type == "header" then .version = 1 else . end' "$c" >"$tmp/v1-$m.jsonl"
    "$EERL_BIN" analyze --json "$tmp/v1-$m.jsonl" >"$tmp/v1-$m.json" 2>&1
    expect_rc 0 $? "analyze on a format-1 $m trace"
    jq -e --slurpfile a "$tmp/$m/c1.json" '.recomputed and
        ((.estimate.saving_pct - $a[0].estimate.saving_pct) | fabs) < 1e-6 and
        .estimate.updates == $a[0].estimate.updates' "$tmp/v1-$m.json" >/dev/null ||
        fail "format-1 $m trace recomputed differently: $(cat "$tmp/v1-$m.json")"
done
c=$tmp/colocated/seed1-controller.jsonl
jq -c 'select(.type != "estimate") | del(.estimate) |
       if .type == "header" then .version = 1 else . end' "$c" >"$tmp/v1.jsonl"
"$EERL_BIN" analyze --json "$tmp/v1.jsonl" >"$tmp/v1.json" 2>&1
expect_rc 0 $? "analyze on a format-1 trace"
jq -e --slurpfile a "$tmp/colocated/c1.json" '.recomputed and
    ((.estimate.saving_pct - $a[0].estimate.saving_pct) | fabs) < 1e-6 and
    ((.estimate.throughput_change_pct - $a[0].estimate.throughput_change_pct) | fabs) < 1e-9' \
    "$tmp/v1.json" >/dev/null || fail "format-1 trace recomputed differently: $(cat "$tmp/v1.json")"
"$EERL_BIN" analyze "$c" >"$tmp/text.txt" 2>&1
expect_rc 0 $? "analyze in text"
expect_in "$tmp/text.txt" "saving (energy per valid token)" "the text's saving row"
expect_in "$tmp/text.txt" "90% interval" "the text's interval"

# the H200 observe-only runs (26 updates, old format): 0 inside, intervals at most 3 points wide
inside=0
for k in 0 1 2 3 4 5 6 7 8 9; do
    t=$EERL_SOURCE_DIR/data/h200/grpo-2026-11-30/colocated-p200-s$k/trace.jsonl
    "$EERL_BIN" analyze --json "$t" >"$tmp/h$k.json" 2>&1
    expect_rc 0 $? "analyze H200 p200-s$k"
    jq -e '.estimate | .judged and .saving_ci_pct[1] - .saving_ci_pct[0] <= 3' "$tmp/h$k.json" \
        >/dev/null || fail "H200 p200-s$k: not judged or wider than 3 points: $(cat "$tmp/h$k.json")"
    if jq -e '.estimate | .saving_ci_pct[0] <= 0 and 0 <= .saving_ci_pct[1]' "$tmp/h$k.json" \
        >/dev/null; then
        inside=$((inside + 1))
    fi
done
[ "$inside" -ge 8 ] || fail "H200: 0 inside the interval in $inside of 10 runs (at least 8)"

# the TRL run whose generation the work does not explain: cannot be judged, said so
t=$EERL_SOURCE_DIR/data/h200/trl-2026-12-01/trl-grpo/trace.jsonl
"$EERL_BIN" analyze --json "$t" >"$tmp/trl.json" 2>&1
expect_rc 0 $? "analyze the TRL trace"
jq -e '.estimate | (.judged | not) and (.why | test("does not explain"))' "$tmp/trl.json" \
    >/dev/null || fail "TRL trace: judged: $(cat "$tmp/trl.json")"
"$EERL_BIN" analyze "$t" >"$tmp/trl.txt" 2>&1
expect_in "$tmp/trl.txt" "cannot be judged" "the TRL text"

exit $((fails > 0))
