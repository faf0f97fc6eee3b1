#!/usr/bin/env bash
# `eerl report TRACE... [-o FILE]`: a PNG or an SVG (by the extension) drawn by gnuplot from the
# traces of `eerl sim`: with a controller run, its clocks, the change against the governor with
# the allowance drawn, power per phase under both (Figure 1) and the change per setting
# (Figure 2); with governor (observe-only) traces alone, power and energy per phase; the
# default output is the first trace's name with .png. Every bad input named with nothing left
# behind: an unknown extension, no traces, a directory, a missing trace, an unwritable output.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"

. "$(dirname "$0")/testlib.sh" || exit 1
export TMPDIR="$tmp" # report's scratch directory goes here: checked for leftovers below

"$EERL_BIN" sim --seeds 2 --updates 40 --trace "$tmp/d" >/dev/null 2>&1
expect_rc 0 $? "eerl sim"

if command -v gnuplot >/dev/null; then
    "$EERL_BIN" report "$tmp"/d/*.jsonl -o "$tmp/r.png" 2>"$tmp/err"
    expect_rc 0 $? "report PNG"
    expect_in "$tmp/err" "wrote $tmp/r.png" "report PNG"
    [ "$(head -c 8 "$tmp/r.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] ||
        fail "r.png is not a PNG"
    [ "$(stat -c %s "$tmp/r.png")" -gt 20000 ] || fail "r.png is suspiciously small"
    "$EERL_BIN" report "$tmp/d/seed2-controller.jsonl" -o "$tmp/r.svg" 2>"$tmp/err"
    expect_rc 0 $? "report SVG without a governor trace"
    grep -q "<svg" "$tmp/r.svg" || fail "r.svg is not an SVG"
    grep -q "no governor trace of the same seed" "$tmp/r.svg" || fail "SVG: missing-governor note"
    grep -q "calibration" "$tmp/r.svg" || fail "SVG: calibration not marked"
    # with the governor: the allowance, Figure 1 and Figure 2
    "$EERL_BIN" report "$tmp"/d/seed1-*.jsonl -o "$tmp/c.svg" 2>"$tmp/err"
    expect_rc 0 $? "report SVG with the governor"
    for want in "allowance (-2%)" "power per phase" "governor run dashed" \
        "per setting the controller ran" "Gov/Gov"; do
        grep -qF "$want" "$tmp/c.svg" || fail "SVG with the governor lacks '$want'"
    done
    # governor traces only (observe-only, a cluster's first run): plotted, default output name
    "$EERL_BIN" report "$tmp"/d/seed1-governor.jsonl "$tmp"/d/seed2-governor.jsonl 2>"$tmp/err"
    expect_rc 0 $? "report of governor traces only"
    expect_in "$tmp/err" "wrote $tmp/d/seed1-governor.png (observe-only" "governor only"
    [ "$(head -c 8 "$tmp/d/seed1-governor.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] ||
        fail "seed1-governor.png is not a PNG"
    "$EERL_BIN" report "$tmp"/d/seed1-governor.jsonl -o "$tmp/g.svg" 2>"$tmp/err"
    for want in "observe-only" "power per phase" "energy per phase per update" "log-prob" \
        "energy per valid training token"; do
        grep -qF "$want" "$tmp/g.svg" || fail "governor-only SVG lacks '$want'"
    done
    rm -f "$tmp/d/seed1-governor.png"
else
    "$EERL_BIN" report "$tmp"/d/*.jsonl -o "$tmp/r.png" 2>"$tmp/err"
    expect_rc 1 $? "report without gnuplot"
    expect_in "$tmp/err" "gnuplot not found: apt-get install gnuplot-nox" "no gnuplot"
fi

"$EERL_BIN" report "$tmp"/d/*.jsonl -o "$tmp/r.jpg" 2>"$tmp/err"
expect_rc 2 $? "bad extension"
expect_in "$tmp/err" "output '$tmp/r.jpg' must end in .png or .svg" "bad extension"
"$EERL_BIN" report -o "$tmp/x.png" 2>"$tmp/err"
expect_rc 2 $? "no traces"
expect_in "$tmp/err" "no traces given" "no traces"
"$EERL_BIN" report "$tmp/d" -o "$tmp/x.png" 2>"$tmp/err"
expect_rc 1 $? "a directory"
expect_in "$tmp/err" "'$tmp/d' is a directory; give the traces in it" "a directory"
"$EERL_BIN" report "$tmp/none.jsonl" -o "$tmp/x.png" 2>"$tmp/err"
expect_rc 1 $? "missing trace"
expect_in "$tmp/err" "cannot open trace '$tmp/none.jsonl'" "missing trace"
if command -v gnuplot >/dev/null; then
    "$EERL_BIN" report "$tmp"/d/*.jsonl -o "$tmp/no/such/dir/x.png" 2>"$tmp/err"
    expect_rc 1 $? "unwritable output"
    expect_in "$tmp/err" "cannot write '$tmp/no/such/dir/x.png'" "unwritable output"
fi
[ ! -e "$tmp/x.png" ] || fail "a failed report left x.png"
ls -d "$tmp"/eerl-report-* >/dev/null 2>&1 && fail "report left its scratch directory"

[ $fails -eq 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
echo "ok"
