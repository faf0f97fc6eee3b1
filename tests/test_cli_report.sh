#!/usr/bin/env bash
# `eerl report TRACE... -o FILE`: a PNG or an SVG (by the extension) drawn by gnuplot from the
# traces of `eerl sim`, and every bad input named with nothing left behind: no output, an
# unknown extension, no traces, governor traces only, a missing trace, an unwritable output.
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
else
    "$EERL_BIN" report "$tmp"/d/*.jsonl -o "$tmp/r.png" 2>"$tmp/err"
    expect_rc 1 $? "report without gnuplot"
    expect_in "$tmp/err" "gnuplot not found: apt-get install gnuplot-nox" "no gnuplot"
fi

"$EERL_BIN" report "$tmp"/d/*.jsonl 2>"$tmp/err"
expect_rc 2 $? "no output"
expect_in "$tmp/err" "no output file; give -o FILE.png or -o FILE.svg" "no output"
"$EERL_BIN" report "$tmp"/d/*.jsonl -o "$tmp/r.jpg" 2>"$tmp/err"
expect_rc 2 $? "bad extension"
expect_in "$tmp/err" "output '$tmp/r.jpg' must end in .png or .svg" "bad extension"
"$EERL_BIN" report -o "$tmp/x.png" 2>"$tmp/err"
expect_rc 2 $? "no traces"
expect_in "$tmp/err" "no traces given" "no traces"
"$EERL_BIN" report "$tmp"/d/*-governor.jsonl -o "$tmp/x.png" 2>"$tmp/err"
expect_rc 1 $? "governor only"
expect_in "$tmp/err" "no controller trace among the 2 given" "governor only"
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
