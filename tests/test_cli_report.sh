#!/usr/bin/env bash
# `eerl report TRACE... [-o FILE]`: a PNG or an SVG (by the extension) drawn by gnuplot from the
# traces of `eerl sim`: with a controller run, its clocks, the change against the governor with
# the allowance drawn, power per phase under both (Figure 1) and the change per setting
# (Figure 2); a controller run alone, only the panels that need no governor run; with governor
# (observe-only) traces alone, power and energy per phase; every panel's y axis names its unit,
# power in W when it is below a kW; the default output is the first trace's name with .png.
# Every bad input named with nothing left behind: an unknown extension, no traces, a directory,
# a missing trace, an unwritable output.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"

. "$(dirname "$0")/testlib.sh" || exit 1
export TMPDIR="$tmp" # report's scratch directory goes here: checked for leftovers below

# The y labels of an SVG's panels, top to bottom, joined by '|' (gnuplot drops one that its tick
# labels push off the picture, so a missing unit shows here too).
ylabels() {
    grep -A1 'rotate(270)' "$1" | sed -n 's/.*<tspan[^>]*>\([^<]*\)<\/tspan>.*/\1/p' | paste -sd'|'
}
# expect_panels SVG 'label|label|...' WHAT
expect_panels() {
    local got
    got=$(ylabels "$1")
    [ "$got" = "$2" ] || fail "$3: panels' y labels '$got', want '$2'"
}

"$EERL_BIN" sim --seeds 2 --updates 40 --trace "$tmp/d" >/dev/null 2>&1
expect_rc 0 $? "eerl sim"

if command -v gnuplot >/dev/null; then
    "$EERL_BIN" report "$tmp"/d/*.jsonl -o "$tmp/r.png" 2>"$tmp/err"
    expect_rc 0 $? "report PNG"
    expect_in "$tmp/err" "wrote $tmp/r.png" "report PNG"
    [ "$(head -c 8 "$tmp/r.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] ||
        fail "r.png is not a PNG"
    [ "$(stat -c %s "$tmp/r.png")" -gt 20000 ] || fail "r.png is suspiciously small"
    # a controller run alone: clocks, power per phase and energy per token, no empty panel
    "$EERL_BIN" report "$tmp/d/seed2-controller.jsonl" -o "$tmp/r.svg" 2>"$tmp/err"
    expect_rc 0 $? "report SVG without a governor trace"
    grep -q "<svg" "$tmp/r.svg" || fail "r.svg is not an SVG"
    grep -q "calibration" "$tmp/r.svg" || fail "SVG: calibration not marked"
    expect_panels "$tmp/r.svg" "SM clock (MHz)|power (kW)|energy (J / token)" "controller alone"
    grep -q "no governor trace" "$tmp/r.svg" && fail "controller alone: an empty comparison panel"
    # with the governor: the allowance, Figure 1 and Figure 2
    "$EERL_BIN" report "$tmp"/d/seed1-*.jsonl -o "$tmp/c.svg" 2>"$tmp/err"
    expect_rc 0 $? "report SVG with the governor"
    for want in "allowance (-2%)" "power per phase" "governor run dashed" \
        "per setting the controller ran" "Gov/Gov"; do
        grep -qF "$want" "$tmp/c.svg" || fail "SVG with the governor lacks '$want'"
    done
    expect_panels "$tmp/c.svg" \
        "SM clock (MHz)|change (%)|power (kW)|change (%)|energy (J / token)" "with the governor"
    grep -qF "setting: generation/training SM clock (MHz)" "$tmp/c.svg" ||
        fail "SVG with the governor: the settings' axis has no unit"
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
    expect_panels "$tmp/g.svg" "power (kW)|energy (MJ)|energy (J / token)" "governor only"
    # one observe-only session on two idle GPUs (105 W each): 210 W, not a label-less 0.21
    {
        echo '{"type":"header","format":"eerl-trace","version":1,"mode":"colocated",'\
'"governor_peak_mhz":1980,"clocks_mhz":[1980,1500,345]}'
        echo '{"type":"run","observe_only":true}'
        for u in 1 2 3 4 5 6; do
            echo '{"type":"update","update":'$u',"work":{"G":1000,"N":900,"L":50},'\
'"time_s":0.08,"energy_j":16.8,"phases":{"generation":{"time_s":0.05,"energy_j":10.5},'\
'"training":{"time_s":0.03,"energy_j":6.30'$u'}},'\
'"setting":{"observed":{"gen_mhz":"governor","train_mhz":"governor"}},"events":[]}'
        done
    } >"$tmp/obs.jsonl"
    "$EERL_BIN" report "$tmp/obs.jsonl" -o "$tmp/o.svg" 2>"$tmp/err"
    expect_rc 0 $? "one observe-only trace"
    expect_in "$tmp/err" "(observe-only: governor run obs.jsonl)" "one observe-only trace"
    expect_panels "$tmp/o.svg" "power (W)|energy (J)|energy (J / token)" "one observe-only trace"
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
