#!/usr/bin/env bash
# `eerl sim --strategy` for every strategy on the twin (disaggregated 8/32, shortened run, 2
# matched seeds, noise-free so that runs compare exactly): each runs and restores the clocks; the
# governor saves nothing (and, with the default per-update noise, differs from its reference run
# only by that noise); the oracle holds
# one setting from update 1 and meets the allowance; eerl saves energy within the allowance and
# its trace replays to the same decisions. Bad input: an unknown strategy names the valid ones,
# a bad --expected-updates names the value; exit 2, nothing on stdout.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1

common=(--mode disaggregated --alloc 8/32 --updates 60 --seeds 2 --divergence 0 --noise none --json)
for s in governor oracle global-clock linear-search paper eerl; do
    "$EERL_BIN" sim "${common[@]}" --strategy "$s" --expected-updates 60 >"$tmp/$s.json" \
        2>"$tmp/$s.err"
    rc=$?
    [ $rc -eq 0 ] || { fail "--strategy $s: exit $rc"; sed 's/^/    /' "$tmp/$s.err" >&2; continue; }
    jq -e --arg s "$s" '.strategy == $s' "$tmp/$s.json" >/dev/null || fail "$s: strategy not echoed"
done
jq -e '.saving_pct == 0 and .dq_pct == 0' "$tmp/governor.json" >/dev/null ||
    fail "governor: should equal the governor run: $(jq -c '{saving_pct,dq_pct}' "$tmp/governor.json")"
# The default noise (fitted): the governor strategy's run and its reference run draw their own
# per-update noise, so they differ, by about what the noise gives a 60-update mean (tenths of a
# percent), never by a clock's worth.
"$EERL_BIN" sim --mode disaggregated --alloc 8/32 --updates 60 --seeds 2 --divergence 0 --json \
    --strategy governor >"$tmp/governor-noisy.json" 2>"$tmp/governor-noisy.err" ||
    fail "governor with the default noise: exit $?"
jq -e '(.saving_pct != 0 or .dq_pct != 0) and (.saving_pct | fabs) < 1.5 and (.dq_pct | fabs) < 1.5' \
    "$tmp/governor-noisy.json" >/dev/null ||
    fail "governor with the default noise: expected a difference below 1.5% from noise alone, got $(jq -c '{saving_pct,dq_pct}' "$tmp/governor-noisy.json")"
jq -e '.capture_ratio > 0.99 and .capture_ratio < 1.01 and .dq_pct >= -2' "$tmp/oracle.json" \
    >/dev/null || fail "oracle: should be the oracle: $(jq -c '{saving_pct,dq_pct,capture_ratio}' "$tmp/oracle.json")"
jq -e '[.seeds[].after_lock.updates] | all(. >= 58)' "$tmp/oracle.json" >/dev/null ||
    fail "oracle: should lock at update 1: $(jq -c '[.seeds[].after_lock]' "$tmp/oracle.json")"
jq -e '.saving_pct > 5 and .dq_pct >= -2' "$tmp/eerl.json" >/dev/null ||
    fail "eerl: should save within the allowance: $(jq -c '{saving_pct,dq_pct}' "$tmp/eerl.json")"
for s in global-clock linear-search; do
    jq -e '.saving_pct > 0' "$tmp/$s.json" >/dev/null || fail "$s: saves nothing"
done

# eerl's decisions replay from its trace (default horizon: learned).
"$EERL_BIN" sim --mode disaggregated --alloc 8/32 --updates 50 --seeds 1 --strategy eerl \
    --trace "$tmp/tr" >/dev/null 2>"$tmp/tr.err" || fail "eerl with --trace"
"$EERL_BIN" replay "$tmp/tr/seed1-controller.jsonl" >"$tmp/replay.out" 2>&1
grep -qF " 0 mismatches" "$tmp/replay.out" || { fail "eerl trace replay"; tail -5 "$tmp/replay.out" >&2; }
# ... and so do runs whose configuration goes beyond the paper's numbers: a known horizon, and the
# oracle's static setting (the trace header carries them).
"$EERL_BIN" sim --mode disaggregated --alloc 8/32 --updates 50 --seeds 1 --strategy eerl \
    --expected-updates 50 --trace "$tmp/trh" >/dev/null 2>"$tmp/trh.err" || fail "eerl --expected-updates with --trace"
"$EERL_BIN" replay "$tmp/trh/seed1-controller.jsonl" >"$tmp/replayh.out" 2>&1
grep -qF " 0 mismatches" "$tmp/replayh.out" || { fail "--expected-updates trace replay"; tail -5 "$tmp/replayh.out" >&2; }
"$EERL_BIN" sim --mode disaggregated --alloc 8/32 --updates 30 --seeds 1 --strategy oracle \
    --trace "$tmp/tro" >/dev/null 2>"$tmp/tro.err" || fail "oracle with --trace"
"$EERL_BIN" replay "$tmp/tro/seed1-controller.jsonl" >"$tmp/replayo.out" 2>&1
grep -qF " 0 mismatches" "$tmp/replayo.out" || { fail "oracle trace replay"; tail -5 "$tmp/replayo.out" >&2; }

bad() { # expected-text args...
    local want=$1
    shift
    "$EERL_BIN" sim "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"
    rc=$?
    [ $rc -eq 2 ] || fail "sim $*: exit $rc, expected 2"
    grep -qF -- "$want" "$tmp/bad.err" || { fail "sim $*: '$want' not in:"; cat "$tmp/bad.err" >&2; }
    [ ! -s "$tmp/bad.out" ] || fail "sim $*: printed on stdout"
}
bad "unknown strategy 'zeus'; valid strategies: paper, eerl, governor, oracle, global-clock, linear-search" --strategy zeus
bad "unknown strategy 'static'" --strategy static
bad "--expected-updates" --expected-updates 0
bad "--expected-updates" --expected-updates many
bad "'-5'" --expected-updates -5

[ $fails -eq 0 ] && echo "test_strategy_cli: all passed"
exit $((fails > 0))
