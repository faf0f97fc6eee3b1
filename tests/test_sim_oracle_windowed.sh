#!/usr/bin/env bash
# The windowed oracle of `eerl sim` (docs/runtime.md, "Windowed oracle"): the best schedule that may
# change setting every --oracle-window updates within the same whole-run allowance. It never
# saves less than the static oracle (the static setting is one schedule) and its whole-run
# throughput change, scored on runs that switch clocks at the window boundaries, meets the
# allowance, in every mode; where the best setting moves (a dataset switch to much shorter
# responses) it changes setting and saves more than any one setting; with one window it is the
# static oracle itself. The text prints both and the capture against each. Bad input for
# --oracle-window is named, exit 2.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1

check() { # check NAME: the invariants on $tmp/NAME.json
    local f="$tmp/$1.json"
    jq -e '.oracle_windowed.saving_pct >= .oracle.saving_pct' "$f" >/dev/null ||
        fail "$1: windowed oracle below the static one: $(jq -c '[.oracle.saving_pct, .oracle_windowed.saving_pct]' "$f")"
    jq -e '.oracle_windowed.dq_pct >= -2 and ([.seeds[].oracle_windowed.dq_pct] | length) == .n_seeds' \
        "$f" >/dev/null ||
        fail "$1: windowed oracle outside the 2% allowance: $(jq -c .oracle_windowed "$f")"
    jq -e '.oracle_windowed.schedule[0].from_update == 1 and
           (.oracle_windowed.schedule | length) == .oracle_windowed.changes + 1 and
           (.oracle_windowed.window as $w | [.oracle_windowed.schedule[].from_update] |
             all(($w == 1) or (. % $w == 1)))' "$f" >/dev/null ||
        fail "$1: the schedule's changes fall on window boundaries: $(jq -c .oracle_windowed "$f")"
    jq -e '(.capture_ratio_windowed | type) == "number"' "$f" >/dev/null ||
        fail "$1: no capture against the windowed oracle"
}

# mode, allocation, size, updates
configs=(
    "colocated 32 M 120"
    "disaggregated 8/32 M 120"
    "drained 8/24 S 150"
    "inflight 16/32 S 150"
)
for c in "${configs[@]}"; do
    set -- $c
    "$EERL_BIN" sim --mode "$1" --alloc "$2" --size "$3" --updates "$4" --seeds 2 \
        --oracle-window 30 --workload growing --json >"$tmp/$1.json" 2>"$tmp/$1.err"
    expect_rc 0 $? "eerl sim --mode $1 --workload growing"
    check "$1"
done

# A switch to much shorter responses half way: the best setting moves, the schedule follows
# (in flight, where generation's clock sets how much of a batch spills into the next update).
"$EERL_BIN" sim --mode inflight --alloc 16/32 --size S --updates 200 --seeds 2 --workload step \
    --step-factor 0.3 \
    --json >"$tmp/step.json" 2>"$tmp/step.err"
expect_rc 0 $? "eerl sim --workload step --step-factor 0.3"
check step
jq -e '.oracle_windowed.changes >= 1 and .oracle_windowed.held_static == false and
       .oracle_windowed.saving_pct > .oracle.saving_pct + 0.1' "$tmp/step.json" >/dev/null ||
    fail "step 0.3: the windowed oracle should change setting and beat the static one: $(jq -c '[.oracle, .oracle_windowed]' "$tmp/step.json")"
jq -e '.oracle_windowed.schedule | map(.from_update) | index(101) != null' "$tmp/step.json" \
    >/dev/null || fail "step 0.3: a change at the switch (update 101): $(jq -c .oracle_windowed.schedule "$tmp/step.json")"

# One window: the static oracle, figure for figure.
"$EERL_BIN" sim --mode colocated --updates 60 --seeds 2 --oracle-window 60 --json \
    >"$tmp/one.json" 2>"$tmp/one.err"
expect_rc 0 $? "eerl sim --oracle-window 60"
jq -e '.oracle_windowed.saving_pct == .oracle.saving_pct and .oracle_windowed.dq_pct ==
       .oracle.dq_pct and .oracle_windowed.changes == 0 and .oracle_windowed.held_static' \
    "$tmp/one.json" >/dev/null || fail "one window is the static oracle: $(jq -c '[.oracle, .oracle_windowed]' "$tmp/one.json")"

# The text prints both oracles and both captures.
"$EERL_BIN" sim --mode colocated --updates 60 --seeds 1 >"$tmp/text" 2>/dev/null
expect_rc 0 $? "eerl sim (text)"
expect_in "$tmp/text" "oracle (best static)" "text"
expect_in "$tmp/text" "oracle (a setting per 50)" "text"
expect_in "$tmp/text" "capture against the windowed oracle (a setting per 50 updates):" "text"

for bad in 0 x 1.5 -3; do
    "$EERL_BIN" sim --updates 60 --seeds 1 --oracle-window "$bad" >"$tmp/bad.out" 2>"$tmp/bad.err"
    expect_rc 2 $? "--oracle-window $bad"
    expect_in "$tmp/bad.err" "--oracle-window" "--oracle-window $bad"
done
exit $((fails > 0))
