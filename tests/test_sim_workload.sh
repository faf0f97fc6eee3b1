#!/usr/bin/env bash
# `eerl sim --workload`: the default is steady and changes nothing (the JSON of a run without the
# option and with --workload steady agree figure for figure); each drift scenario runs, says
# what it is in the text and the JSON, and moves the governor's work the way it should (growing:
# more tokens per update at the end than at the start; collapsing: fewer; step: a jump at its
# update). Bad input: an unknown scenario, an option of another scenario, a value that is not a
# number or out of range, a step beyond the run — each named, exit 2.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1

run() { # run NAME ARGS...: colocated 32, 60 updates, 2 seeds, JSON into $tmp/NAME.json
    local name=$1
    shift
    "$EERL_BIN" sim --mode colocated --updates 60 --seeds 2 --json "$@" \
        >"$tmp/$name.json" 2>"$tmp/$name.err"
    expect_rc 0 $? "eerl sim $*"
}

run plain
run steady --workload steady
if ! diff <(jq -S 'del(.wall_s)' "$tmp/plain.json") <(jq -S 'del(.wall_s)' "$tmp/steady.json") \
    >"$tmp/diff"; then
    fail "--workload steady differs from no option:"
    head -n 20 "$tmp/diff" >&2
fi
jq -e '.workload.scenario == "steady"' "$tmp/plain.json" >/dev/null ||
    fail "the JSON names the default scenario steady: $(jq -c .workload "$tmp/plain.json")"

# The governor run's mean generated tokens per update over updates A-B, from its trace.
gen_mean() { # gen_mean DIR A B
    jq -s --argjson a "$2" --argjson b "$3" \
        '[.[] | select(.type == "update" and .update >= $a and .update <= $b) | .work.G] |
         add / length' "$1/seed1-governor.jsonl"
}
# check_ratio WHAT NUM DEN LO HI: LO < NUM/DEN < HI
check_ratio() {
    awk -v n="$2" -v d="$3" -v lo="$4" -v hi="$5" 'BEGIN { r = n / d; exit !(r > lo && r < hi) }' ||
        fail "$1: $2 / $3 is not between $4 and $5"
}

sim_trace() { # sim_trace NAME ARGS...: one seed, 60 updates, traces in $tmp/NAME
    local name=$1
    shift
    "$EERL_BIN" sim --mode colocated --updates 60 --seeds 1 --trace "$tmp/$name" "$@" \
        >"$tmp/$name.txt" 2>"$tmp/$name.err"
    expect_rc 0 $? "eerl sim $*"
}

sim_trace steady
sim_trace growing --workload growing
sim_trace collapsing --workload collapsing
sim_trace step --workload step
sim_trace down --workload step --step-at 20 --step-factor 0.5
for w in growing collapsing step; do
    expect_in "$tmp/$w.txt" "workload drift: $w" "the text names the scenario"
done
# Qwen's M workload at the 4096-token limit clips the growth: x2.5 in the median is less in G.
check_ratio "growing: G at the end vs the start" "$(gen_mean "$tmp/growing" 56 60)" \
    "$(gen_mean "$tmp/growing" 2 6)" 1.3 2.6
check_ratio "collapsing: G at the end vs the start" "$(gen_mean "$tmp/collapsing" 56 60)" \
    "$(gen_mean "$tmp/collapsing" 2 6)" 0.2 0.7
check_ratio "step: G after the switch (update 31) vs before" "$(gen_mean "$tmp/step" 31 35)" \
    "$(gen_mean "$tmp/step" 26 30)" 1.3 2.1
check_ratio "step: no change before the switch" "$(gen_mean "$tmp/step" 26 30)" \
    "$(gen_mean "$tmp/step" 2 6)" 0.9 1.1
check_ratio "step 0.5 at update 20" "$(gen_mean "$tmp/down" 20 24)" "$(gen_mean "$tmp/down" 15 19)" \
    0.4 0.7
check_ratio "steady: the preset's drift (+0.4%/update in the median)" \
    "$(gen_mean "$tmp/steady" 56 60)" "$(gen_mean "$tmp/steady" 2 6)" 1.0 1.3
jq -e '.workload.scenario == "step" and .workload.step_at == 20 and .workload.factor == 0.5' \
    <("$EERL_BIN" sim --mode colocated --updates 60 --seeds 1 --workload step --step-at 20 \
        --step-factor 0.5 --json 2>/dev/null) >/dev/null ||
    fail "the JSON holds the step scenario's parameters"
grep -q '"scenario":"collapsing"' "$tmp/collapsing/seed1-controller.jsonl" ||
    fail "the trace's run line names the scenario"

# bad input: each named, exit 2, nothing written
bad() { # bad WHAT-IN-MESSAGE ARGS...
    local want=$1
    shift
    "$EERL_BIN" sim --updates 60 --seeds 1 "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"
    expect_rc 2 $? "eerl sim $*"
    expect_in "$tmp/bad.err" "$want" "eerl sim $*"
    [ -s "$tmp/bad.out" ] && fail "eerl sim $*: wrote to stdout"
}
bad "unknown workload scenario 'grow'; valid: steady, growing, collapsing, step" --workload grow
bad "unknown workload scenario ''" --workload ""
bad "option '--workload' needs a value" --workload
bad "--growth belongs to --workload growing, not to --workload steady" --growth 2
bad "--collapse-tau belongs to --workload collapsing, not to --workload step" --workload step \
    --collapse-tau 5
bad "--growth 'x2' is not a number" --workload growing --growth x2
bad "--growth 0 is out of range" --workload growing --growth 0
bad "--collapse -1 is out of range" --workload collapsing --collapse -1
bad "--step-at 61 is beyond the run's 60 updates" --workload step --step-at 61
bad "--step-at 0 is out of range" --workload step --step-at 0
bad "--step-factor 'nan'" --workload step --step-factor nan
exit $((fails > 0))
