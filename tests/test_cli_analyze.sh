#!/usr/bin/env bash
# `eerl analyze` over traces: pairs controller and governor runs by seed, prints the matched-seed
# table and the Appendix E workload-normalized rows (JSON keys as documented), gives the same
# whole-run figures for one pair as `eerl sim` does for that seed, and names every bad input:
# no traces, a missing file, a file that is not a trace, governor runs only, a controller run
# whose seed has no governor run, runs of different modes, an unknown option.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1

# runs of a seed that differ in their work, as a real cluster's do: analyze judges them
# workload-normalized
"$EERL_BIN" sim --seeds 2 --updates 40 --divergence 0.025 --trace "$tmp/d" --json \
    >"$tmp/sim.json" 2>/dev/null
expect_rc 0 $? "eerl sim (disaggregated)"
"$EERL_BIN" sim --mode colocated --seeds 1 --updates 30 --trace "$tmp/c" >/dev/null 2>&1
expect_rc 0 $? "eerl sim (colocated)"

# Table and JSON.
"$EERL_BIN" analyze "$tmp"/d/*.jsonl >"$tmp/out" 2>"$tmp/err"
expect_rc 0 $? "analyze table"
for s in "disaggregated mode, 2 seed pairs" "whole run" "before lock" "after lock" \
    "whole run, normalized" "fitted on the 2 governor runs' work" \
    "allowance (2%) on the normalized whole run"; do
    expect_in "$tmp/out" "$s" "analyze table"
done
"$EERL_BIN" analyze --json "$tmp"/d/*.jsonl >"$tmp/an.json"
expect_rc 0 $? "analyze --json"
jq -e '(.normalized | has("whole") and has("after_lock") and has("governors") and
        has("governor_time_spread_pct") and has("governor_energy_spread_pct")) and
       (.seeds | length == 2) and .mode == "disaggregated"' "$tmp/an.json" >/dev/null ||
    fail "analyze JSON: $(cat "$tmp/an.json")"
# One pair: the seed's own figures from eerl sim.
"$EERL_BIN" analyze --json "$tmp/d/seed2-controller.jsonl" "$tmp/d/seed2-governor.jsonl" \
    >"$tmp/one.json"
expect_rc 0 $? "analyze one pair"
a=$(jq -c '.seeds[] | select(.seed == 2) | [.saving_pct, .dq_pct]' "$tmp/sim.json")
b=$(jq -c '[.whole.saving_pct, .whole.dq_pct]' "$tmp/one.json")
[ "$a" = "$b" ] || fail "one pair: sim says $a for seed 2, analyze $b"
# Update lines out of order (a trace joined from parts) give the same figures as in order; an
# update recorded twice is refused, naming both lines.
mkdir -p "$tmp/shuf" "$tmp/dup"
cp "$tmp/d/seed2-governor.jsonl" "$tmp/shuf/"
cp "$tmp/d/seed2-governor.jsonl" "$tmp/dup/"
/usr/bin/python3 - "$tmp/d/seed2-controller.jsonl" "$tmp/shuf/seed2-controller.jsonl" \
    "$tmp/dup/seed2-controller.jsonl" <<'PY'
import json, random, sys
lines = open(sys.argv[1]).readlines()
head = [l for l in lines if json.loads(l).get("type") != "update"]
ups = [l for l in lines if json.loads(l).get("type") == "update"]
random.Random(7).shuffle(ups)
open(sys.argv[2], "w").writelines(head + ups)
open(sys.argv[3], "w").writelines(lines + ups[:1])
PY
"$EERL_BIN" analyze --json "$tmp"/shuf/*.jsonl >"$tmp/shuf.json"
expect_rc 0 $? "analyze shuffled"
a=$(jq -c '[.whole, .before_lock, .after_lock, .seeds[0].lock_update, .normalized]' "$tmp/one.json")
b=$(jq -c '[.whole, .before_lock, .after_lock, .seeds[0].lock_update, .normalized]' "$tmp/shuf.json")
[ "$a" = "$b" ] || fail "shuffled updates: in order $a, shuffled $b"
"$EERL_BIN" analyze "$tmp"/dup/*.jsonl >"$tmp/out" 2>"$tmp/err"
expect_rc 1 $? "an update twice"
n=$(wc -l <"$tmp/dup/seed2-controller.jsonl")
expect_in "$tmp/err" "$tmp/dup/seed2-controller.jsonl:$n: update" "an update twice"
expect_in "$tmp/err" "(also at line" "an update twice"

# A trace whose last line was cut short (a full disk or a crash mid-write) is read up to its last
# whole line, with a note naming the line: analyze, report and replay keep every whole line.
# (the session's closing estimate line left out first: the update line is the one cut)
mkdir -p "$tmp/cut"
cp "$tmp/d/seed2-governor.jsonl" "$tmp/cut/"
grep -v '"type":"estimate"' "$tmp/d/seed2-controller.jsonl" >"$tmp/whole.jsonl"
n=$(wc -l <"$tmp/whole.jsonl")
head -c -40 "$tmp/whole.jsonl" >"$tmp/cut/seed2-controller.jsonl"
"$EERL_BIN" analyze --json "$tmp"/cut/*.jsonl >"$tmp/cut.json" 2>"$tmp/err"
expect_rc 0 $? "analyze a cut trace"
expect_in "$tmp/err" "$tmp/cut/seed2-controller.jsonl:$n: the last line is cut short" \
    "analyze a cut trace"
[ "$(jq '.whole.updates' "$tmp/cut.json")" = "$(($(jq '.whole.updates' "$tmp/one.json") - 1))" ] ||
    fail "analyze a cut trace: $(jq -c '.whole' "$tmp/cut.json"), not one update fewer"
"$EERL_BIN" replay --quiet "$tmp/cut/seed2-controller.jsonl" >"$tmp/out" 2>"$tmp/err"
expect_rc 0 $? "replay a cut trace"
expect_in "$tmp/err" "$tmp/cut/seed2-controller.jsonl:$n: the last line is cut short" \
    "replay a cut trace"
expect_in "$tmp/out" "replayed $(($(grep -c '"type":"update"' "$tmp/d/seed2-controller.jsonl") - 1)) updates" \
    "replay a cut trace"

# replay --json: a missing ratio is null, not the trace's string "nan"
"$EERL_BIN" replay --json "$tmp/d/seed1-controller.jsonl" >"$tmp/rp.json" 2>/dev/null
expect_rc 0 $? "replay --json"
grep -q '"nan"' "$tmp/rp.json" && fail "replay --json writes NaN as the string \"nan\""
jq -e -s 'length > 0 and any(.[]; .time_ratio == null)' "$tmp/rp.json" >/dev/null ||
    fail "replay --json: no event with a null ratio"

# Bad input.
"$EERL_BIN" analyze >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "no traces"
expect_in "$tmp/err" "no traces given" "no traces"
"$EERL_BIN" analyze "$tmp/nope.jsonl" >"$tmp/out" 2>"$tmp/err"
expect_rc 1 $? "missing file"
expect_in "$tmp/err" "cannot open trace '$tmp/nope.jsonl'" "missing file"
echo "hello" >"$tmp/junk.jsonl"
"$EERL_BIN" analyze "$tmp/junk.jsonl" >"$tmp/out" 2>"$tmp/err"
expect_rc 1 $? "not a trace"
expect_in "$tmp/err" "$tmp/junk.jsonl:1: not a JSON line" "not a trace"
# A negative energy on an update the controller took in is no measurement: refused, named.
mkdir -p "$tmp/neg"
cp "$tmp"/d/seed2-governor.jsonl "$tmp/neg/"
/usr/bin/python3 - "$tmp"/d/seed2-controller.jsonl "$tmp/neg/seed2-controller.jsonl" <<'PY'
import json, sys
out, done = [], False
for line in open(sys.argv[1]):
    o = json.loads(line)
    if not done and o.get("type") == "update" and o.get("update", 0) >= 5:
        o["energy_j"] = -2.05e6
        done = True
        line = json.dumps(o) + "\n"
    out.append(line)
open(sys.argv[2], "w").writelines(out)
PY
"$EERL_BIN" analyze "$tmp"/neg/*.jsonl >"$tmp/out" 2>"$tmp/err"
expect_rc 1 $? "negative energy"
expect_in "$tmp/err" '"energy_j" is -2.05e+06: a measurement is a finite number >= 0' "negative energy"
"$EERL_BIN" analyze "$tmp"/d/seed*-governor.jsonl >"$tmp/out" 2>"$tmp/err"
expect_rc 1 $? "governor runs only"
expect_in "$tmp/err" "need governor and controller traces; got 2 governor and 0 controller" \
    "governor only"
"$EERL_BIN" analyze "$tmp/d/seed1-governor.jsonl" "$tmp/d/seed2-controller.jsonl" \
    >"$tmp/out" 2>"$tmp/err"
expect_rc 1 $? "unmatched seed"
expect_in "$tmp/err" "controller trace of seed 2 has no governor trace" "unmatched seed"
"$EERL_BIN" analyze "$tmp/d/seed1-governor.jsonl" "$tmp/c/seed1-controller.jsonl" \
    >"$tmp/out" 2>"$tmp/err"
expect_rc 1 $? "mixed modes"
expect_in "$tmp/err" "is a colocated run but" "mixed modes"
"$EERL_BIN" analyze --csv "$tmp"/d/*.jsonl >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "unknown option"
expect_in "$tmp/err" "unknown option '--csv'" "unknown option"

[ $fails -eq 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
echo "ok"
