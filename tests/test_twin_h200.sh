#!/usr/bin/env bash
# The twin's grpo-tiny/h200 preset, built from a real observe-only run on an H200
# (tools/h200/preset.py, data/h200/grpo-2026-11-30/colocated-packed): a governor run of the twin
# reproduces the run's measured time and energy per update and its workload (valid tokens are
# what overlong filtering keeps), the preset says what is measured and what is assumed, the
# builder is reproducible from the committed data, and models without an H200 preset or GPUs
# without a grpo-tiny preset are refused by name.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"
: "${EERL_SOURCE_DIR:?EERL_SOURCE_DIR must name the source tree}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1
params="$EERL_SOURCE_DIR/data/twin/params.json"
preset='.presets["grpo-tiny/h200"]'
jq -e "$preset.source.measured and $preset.source.assumed" "$params" >/dev/null ||
    fail "the preset must say what is measured and what is assumed"
want_s=$(jq "$preset.source.measured_update_s" "$params")
want_j=$(jq "$preset.source.measured_update_j" "$params")

"$EERL_BIN" sim --model grpo-tiny --gpu h200 --mode colocated --alloc 1 --size M --updates 40 \
    --seeds 1 --strategy governor --divergence 0 --trace "$tmp/run" >"$tmp/out" 2>"$tmp/err" ||
    { fail "eerl sim grpo-tiny/h200: exit $?"; sed 's/^/    /' "$tmp/err" >&2; }
grep -qF "workload M (P/K/B 40/8/320)" "$tmp/out" || fail "workload size not described from the preset"
jq -e -s --argjson s "$want_s" --argjson j "$want_j" '
    [.[] | select(.type == "update" and .update >= 2)] as $u
    | ($u | map(.time_s) | add / length) as $t
    | ($u | map(.energy_j) | add / length) as $e
    | ($u | map(.work.N / .work.G) | add / length) as $ng
    | ($t / $s - 1 | fabs) < 0.02 and ($e / $j - 1 | fabs) < 0.02 and $ng > 0.3 and $ng < 0.6
      and ($u | all(.work.L == 1024))' "$tmp/run/seed1-governor.jsonl" >/dev/null ||
    fail "twin governor run vs the measured run (want $want_s s, $want_j J per update): $(jq -s -c '[.[] | select(.type == "update" and .update >= 2)] | {T: (map(.time_s) | add / length), E: (map(.energy_j) | add / length), NG: (map(.work.N / .work.G) | add / length)}' "$tmp/run/seed1-governor.jsonl")"

# The builder reproduces the committed preset from the committed run.
if command -v python3 >/dev/null; then
    py=/usr/bin/python3
    [ -x "$py" ] || py=python3
    cp "$params" "$tmp/p.json"
    if "$py" "$EERL_SOURCE_DIR/tools/h200/preset.py" --params "$tmp/p.json" >/dev/null 2>"$tmp/perr"; then
        a=$(jq -S -c "$preset, .models[\"grpo-tiny\"]" "$params")
        b=$(jq -S -c "$preset, .models[\"grpo-tiny\"]" "$tmp/p.json")
        [ "$a" = "$b" ] || fail "tools/h200/preset.py does not reproduce the committed preset"
    else
        fail "tools/h200/preset.py failed: $(cat "$tmp/perr")"
    fi
fi

# No grpo-tiny preset on the H100; no such model.
if "$EERL_BIN" sim --model grpo-tiny --gpu h100 --mode colocated --alloc 1 >/dev/null 2>"$tmp/e1"; then
    fail "grpo-tiny on h100 should be refused"
elif ! grep -qF "no preset for grpo-tiny on h100" "$tmp/e1"; then
    fail "grpo-tiny on h100 should be refused by name: $(cat "$tmp/e1")"
fi
if "$EERL_BIN" sweep --model grpo-huge --gpu h200 --mode colocated --alloc 1 --size M \
    --pairs Gov/Gov >/dev/null 2>"$tmp/e2"; then
    fail "an unknown model should be refused"
elif ! grep -qF "grpo-huge" "$tmp/e2" || ! grep -qF "grpo-tiny" "$tmp/e2"; then
    fail "an unknown model should be named with the valid ones: $(cat "$tmp/e2")"
fi

[ $fails -eq 0 ] && echo "test_twin_h200: ok"
exit $((fails > 0))
