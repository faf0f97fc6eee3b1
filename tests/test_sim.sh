#!/usr/bin/env bash
# `eerl sim` end to end on the simulated cluster, all four execution modes, 4 matched seeds each
# (the paper's Table 4 allocations, shortened runs to keep the test fast): the controller run
# saves energy, its workload-normalized whole-run throughput change (Appendix E) is >= -2%, every
# trace replays to the same
# decisions (`eerl replay`), `eerl analyze` on the traces prints the same figures as `eerl sim`,
# and the runtime restored every clock when each session closed (eerl sim checks the twin's
# device and the actuator and fails otherwise). Bad input: an unknown strategy, an allowed loss
# <= 0 or >= 50%, fewer updates than the calibration, an allocation that does not fit the mode, a
# pool of 0 GPUs or more GPUs than the simulated cluster takes, an unwritable trace directory —
# each named, non-zero exit, nothing left behind.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1

# mode, allocation, size, updates
configs=(
    "colocated 32 M 45"
    "disaggregated 8/32 M 45"
    "drained 8/24 S 70"
    "inflight 16/32 S 100"
)
for c in "${configs[@]}"; do
    set -- $c
    mode=$1 alloc=$2 size=$3 updates=$4
    dir="$tmp/$mode"
    "$EERL_BIN" sim --mode "$mode" --alloc "$alloc" --size "$size" --updates "$updates" \
        --seeds 4 --trace "$dir" --json >"$tmp/$mode.json" 2>"$tmp/$mode.err"
    rc=$?
    expect_rc 0 $rc "eerl sim --mode $mode"
    [ $rc -eq 0 ] || { sed 's/^/    /' "$tmp/$mode.err" >&2; continue; }
    expect_in "$tmp/$mode.err" "seed 4 (4/4)" "$mode: progress on stderr"
    # The keys the issue lists, at the top and per seed.
    jq -e 'has("saving_pct") and has("dq_pct") and (.before_lock|has("updates") and
           has("saving_pct") and has("dq_pct")) and (.after_lock|has("updates") and
           has("saving_pct") and has("dq_pct") and has("setting")) and
           (.oracle|has("setting") and has("saving_pct") and has("dq_pct")) and
           has("capture_ratio") and (.seeds|length == 4) and
           all(.seeds[]; has("saving_pct") and has("dq_pct") and has("before_lock") and
               has("after_lock") and has("oracle") and has("capture_ratio"))' \
        "$tmp/$mode.json" >/dev/null || fail "$mode: JSON keys: $(cat "$tmp/$mode.json")"
    jq -e '.saving_pct > 0' "$tmp/$mode.json" >/dev/null ||
        fail "$mode: the controller run should save energy: $(jq -c '{saving_pct,dq_pct}' "$tmp/$mode.json")"
    # A seed's two runs do the same work by default: the headline is the exact matched-seed
    # whole run, the figure the verdict is judged on, and it meets the allowance.
    jq -e '.rows == "same-work" and .divergence == 0 and .dq_pct == .whole.dq_pct and
           .saving_pct == .whole.saving_pct and .verdict.figure == "whole" and
           .verdict.dq_pct == .dq_pct and .verdict.met == true and .dq_pct >= -2' \
        "$tmp/$mode.json" >/dev/null ||
        fail "$mode: headline and verdict: $(jq -c '{rows,saving_pct,dq_pct,verdict}' "$tmp/$mode.json")"
    jq -e '.oracle.dq_pct >= -2 and .oracle.saving_pct >= 0' "$tmp/$mode.json" >/dev/null ||
        fail "$mode: the oracle must meet the allowance: $(jq -c .oracle "$tmp/$mode.json")"
    # Every trace replays to the same decisions.
    n=0
    for t in "$dir"/seed*-*.jsonl; do
        n=$((n + 1))
        "$EERL_BIN" replay "$t" >"$tmp/replay.out" 2>&1 ||
            { fail "$mode: eerl replay $t"; sed 's/^/    /' "$tmp/replay.out" | tail -5 >&2; }
        expect_in "$tmp/replay.out" " 0 mismatches" "$mode: replay $(basename "$t")"
    done
    [ $n -eq 8 ] || fail "$mode: expected 8 traces (governor and controller for 4 seeds), got $n"
    # eerl analyze reproduces the figures from the traces.
    "$EERL_BIN" analyze --json "$dir"/*.jsonl >"$tmp/$mode.an.json" 2>"$tmp/an.err"
    expect_rc 0 $? "$mode: eerl analyze"
    for key in .saving_pct .dq_pct .before_lock .after_lock '.seeds[] | {seed, saving_pct, dq_pct, before_lock, after_lock: (.after_lock | del(.setting))}'; do
        a=$(jq -c "$key" "$tmp/$mode.json" | sort)
        b=$(jq -c "$key" "$tmp/$mode.an.json" | sort)
        [ "$a" = "$b" ] || fail "$mode: analyze differs from sim on $key: sim $a, analyze $b"
    done
    jq -e '.normalized.whole.dq_pct >= -2 and .normalized.whole.saving_pct > 0' \
        "$tmp/$mode.an.json" >/dev/null ||
        fail "$mode: workload-normalized whole-run throughput change below -2%: $(jq -c .normalized.whole "$tmp/$mode.an.json")"
    "$EERL_BIN" analyze "$dir"/*.jsonl >"$tmp/an.txt" 2>&1
    expect_in "$tmp/an.txt" "after lock" "$mode: analyze table"
    expect_in "$tmp/an.txt" "allowance (2%) on the whole run: met" "$mode: analyze verdict"
done

# The default table (the main job's), shortened.
"$EERL_BIN" sim --seeds 2 --updates 40 >"$tmp/table" 2>"$tmp/err"
expect_rc 0 $? "eerl sim table"
for s in "whole run" "before lock" "after lock" "oracle (best static)" "capture ratio" \
    "disaggregated 8/32" "64/8/512"; do
    expect_in "$tmp/table" "$s" "table"
done

# Every figure the text prints is in the JSON, for runs of a seed on the same work (the default)
# and diverging (--divergence): the headline row is the verdict's figure, and one line says what
# the rows are. eerl analyze on the traces likewise.
cat >"$tmp/figures.py" <<'EOF'
import json, re, sys
text, js = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
nums = []
def walk(v):
    if isinstance(v, bool):
        return
    if isinstance(v, (int, float)):
        nums.extend([v, 100 * v])
    elif isinstance(v, dict):
        for x in v.values():
            walk(x)
    elif isinstance(v, list):
        for x in v:
            walk(x)
walk(js)
missing = []
for line in text.splitlines():
    if line.startswith("  traces:"):
        continue
    for tok in re.findall(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?![\w.])", line):
        d = len(tok.split(".")[1]) if "." in tok else 0
        t = float(tok)
        if not any(abs(round(v, d) - t) < 0.5 * 10 ** -d + 1e-9 for v in nums):
            missing.append((tok, line.strip()))
assert not missing, "printed but not in the JSON: %s" % missing
EOF
for div in 0 0.025; do
    "$EERL_BIN" sim --seeds 2 --updates 70 --divergence $div --trace "$tmp/fig$div" \
        >"$tmp/fig.txt" 2>/dev/null
    "$EERL_BIN" sim --seeds 2 --updates 70 --divergence $div --json >"$tmp/fig.json" 2>/dev/null
    /usr/bin/python3 "$tmp/figures.py" "$tmp/fig.txt" "$tmp/fig.json" ||
        fail "divergence $div: sim --json lacks figures the text prints"
    "$EERL_BIN" analyze "$tmp/fig$div"/*.jsonl >"$tmp/an.txt" 2>&1
    "$EERL_BIN" analyze --json "$tmp/fig$div"/*.jsonl >"$tmp/an.json" 2>&1
    /usr/bin/python3 "$tmp/figures.py" "$tmp/an.txt" "$tmp/an.json" ||
        fail "divergence $div: analyze --json lacks figures the text prints"
    grep -q "^rows: " "$tmp/fig.txt" || fail "divergence $div: no line says what the rows are"
    first=$(sed -n '/^  interval/{n;p;q}' "$tmp/fig.txt")
    # The count column says what it counts; seeds that lock at different updates give a range
    # of counts written "N to M", never "N-M", which reads as update numbers.
    grep -q "^  interval  *updates per seed  gen/train MHz" "$tmp/fig.txt" ||
        fail "divergence $div: count column header: $(grep '^  interval' "$tmp/fig.txt")"
    grep -E "^  (before|after) lock.*[0-9]-[0-9]" "$tmp/fig.txt" &&
        fail "divergence $div: a range of counts reads as update numbers"
    if [ $div = 0 ]; then
        expect_in "$tmp/fig.txt" "allowance (2%) on the whole run: met" "divergence 0: verdict"
        jq -e '.rows == "same-work" and .dq_pct == .whole.dq_pct' "$tmp/fig.json" >/dev/null ||
            fail "divergence 0: the headline is not the exact whole run"
        case $first in "  whole run "*) ;; *) fail "divergence 0: first row: $first" ;; esac
    else
        expect_in "$tmp/fig.txt" "allowance (2%) on the normalized whole run" "divergence: verdict"
        jq -e '.rows == "normalized" and .dq_pct == .normalized.whole.dq_pct and
               .verdict.figure == "normalized.whole"' "$tmp/fig.json" >/dev/null ||
            fail "divergence 0.025: the headline is not the normalized whole run: $(jq -c '{rows,dq_pct,normalized,verdict}' "$tmp/fig.json")"
        case $first in "  whole run, normalized "*) ;; *) fail "divergence 0.025: first row: $first" ;; esac
    fi
done

# Bad input: each named, exit 2, no trace directory left behind.
bad() { # expected-text args...
    local want=$1
    shift
    "$EERL_BIN" sim --trace "$tmp/bad" "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"
    expect_rc 2 $? "sim $*"
    expect_in "$tmp/bad.err" "$want" "sim $*"
    [ ! -e "$tmp/bad" ] || { fail "sim $*: left $tmp/bad behind"; rm -rf "$tmp/bad"; }
    [ ! -s "$tmp/bad.out" ] || fail "sim $*: printed on stdout"
}
bad "unknown strategy 'greedy'" --strategy greedy
bad "--allowed-loss 0 is out of range" --allowed-loss 0
bad "--allowed-loss -0.01 is out of range" --allowed-loss -0.01
bad "--allowed-loss 0.5 is out of range" --allowed-loss 0.5
bad "--allowed-loss 50% is out of range: allowed_loss 0.5 must be in (0, 0.5)" --allowed-loss 50%
bad "--allowed-loss 'two' is not a number" --allowed-loss two
bad "--updates 15 is not more than the controller's calibration (15 updates" --updates 15
bad "--updates 40 is not more than the controller's calibration (45 updates in inflight" \
    --mode inflight --alloc 16/32 --updates 40
bad "unknown mode 'async'" --mode async
bad "allocation '8/32' does not fit mode colocated" --mode colocated --alloc 8/32
bad "allocation '64' does not fit mode drained: give GEN/TRAIN pool sizes" --mode drained --alloc 64
bad "--alloc '0/32' has a pool of 0 GPUs; each pool needs at least 1" --alloc 0/32
bad "--alloc '0' has a pool of 0 GPUs" --mode colocated --alloc 0
bad "--alloc '1048576/1' asks for 1048577 GPUs; the simulated cluster takes at most 1048576" \
    --alloc 1048576/1
bad "--alloc '2000000' asks for 2000000 GPUs; the simulated cluster takes at most 1048576" \
    --mode colocated --alloc 2000000
bad "--alloc '8/99999999999999999999999': a pool size is out of range; at most 1048576 GPUs" \
    --alloc 8/99999999999999999999999
bad "--alloc '8/' is malformed" --alloc 8/
bad "--alloc '8/-1' is malformed" --alloc 8/-1
bad "unknown option '--bogus'" --bogus
# An unwritable trace path: exit 1, named, nothing written.
touch "$tmp/afile"
"$EERL_BIN" sim --seeds 1 --updates 20 --trace "$tmp/afile/traces" >"$tmp/out" 2>"$tmp/err"
expect_rc 1 $? "unwritable trace directory"
expect_in "$tmp/err" "cannot create trace directory '$tmp/afile/traces'" "unwritable trace"
[ ! -s "$tmp/out" ] || fail "unwritable trace: printed results"
"$EERL_BIN" sim --seeds 1 --updates 20 --trace "$tmp/afile" >"$tmp/out" 2>"$tmp/err"
expect_rc 1 $? "trace path is a file"
expect_in "$tmp/err" "is not a directory" "trace path is a file"

[ $fails -eq 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
echo "ok"
