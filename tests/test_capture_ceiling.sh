#!/usr/bin/env bash
# tools/capture-ceiling on a short colocated run (2 seeds, a 60 MHz window of pairs): it prints
# the oracle on its grid and, for each margin, a ceiling at most 1 that does not rise as the
# margin grows; the ceiling at margin 0 matches a hand combination of the sweep's own rows; bad
# input is refused with exit 2, naming the value. With --within, the margins follow from the
# noise the tool measures, which the traces confirm (see below).
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1

tool="$(dirname "$0")/../tools/capture-ceiling"
args=(--eerl "$EERL_BIN" --mode colocated --alloc 32 --size M --updates 40 --governor 9 --seeds 2
    --gen 1770-1830 --train 1290-1350)
"$tool" "${args[@]}" --margins 0,0.3,0.6 >"$tmp/out" 2>"$tmp/err"
expect_rc 0 $? "capture-ceiling"
expect_in "$tmp/out" "oracle on the grid:" "capture-ceiling: oracle line"
# margin rows: margin best dq saving whole-dq whole-saving ceiling
awk '$1 ~ /^[0-9.]+$/ && NF == 7 { print $1, $7 }' "$tmp/out" >"$tmp/rows"
[ "$(wc -l <"$tmp/rows")" -eq 3 ] || fail "capture-ceiling: three margin rows expected: $(cat "$tmp/out")"
awk 'BEGIN { prev = 2 } { if ($2 > 1.0005 || $2 > prev + 1e-9) bad = 1; prev = $2 } END { exit bad }' \
    "$tmp/rows" || fail "capture-ceiling: ceilings must be <= 1 and not rise with the margin: $(cat "$tmp/rows")"
# By hand: the sweep over updates 11-40 and the oracle over 2-40, combined with 30/39 weight.
pairs=
for g in 1830 1815 1800 1785 1770; do
    for t in 1350 1335 1320 1305 1290; do pairs="$pairs${pairs:+,}$g/$t"; done
done
sw=(sweep --model qwen3-30b-a3b --gpu h100 --mode colocated --alloc 32 --size M --pairs "$pairs"
    --seeds 2 --divergence 0 --csv)
"$EERL_BIN" "${sw[@]}" --updates 2-40 >"$tmp/whole.csv" 2>/dev/null
"$EERL_BIN" "${sw[@]}" --updates 11-40 >"$tmp/after.csv" 2>/dev/null
want=$(awk -F, 'NR == FNR { if (FNR > 1 && $3 >= -2 && $4 > o) o = $4; next }
    FNR > 1 { w = 30 / 39; q = (1 - w) + w / (1 + $3 / 100); if (100 * (1 / q - 1) >= -2 && w * $4 > b) b = w * $4 }
    END { printf "%.3f", b / o }' "$tmp/whole.csv" "$tmp/after.csv")
got=$(awk 'NR == 1 { print $2 }' "$tmp/rows")
[ "$got" = "$want" ] || fail "capture-ceiling: margin 0 ceiling $got, by hand $want"

# --within: the margin of each K follows from the measured noise (z * s * sqrt(1/K + 1/n)), the
# noise matches the traces' own log ratio, two settings never capture less than one, the bound
# is the best two-setting row and no bound exceeds the margin-0 ceiling of the same K.
wargs=(--eerl "$EERL_BIN" --mode colocated --alloc 32 --size M --updates 40 --governor 5,9
    --seeds 2 --noise-seeds 2 --gen 1770-1830 --train 1290-1350 --within 0.95)
"$tool" "${wargs[@]}" >"$tmp/wout" 2>"$tmp/werr"
expect_rc 0 $? "capture-ceiling --within 0.95"
s=$(sed -n 's/.*log sd s = \([0-9.]*\)%.*/\1/p' "$tmp/wout")
[ -n "$s" ] || fail "capture-ceiling --within: no noise line: $(cat "$tmp/wout")"
for noise in fitted none; do
    "$EERL_BIN" sim --mode colocated --alloc 32 --size M --updates 40 --seeds 2 --strategy governor \
        --divergence 0 --noise "$noise" --trace "$tmp/tr-$noise" >/dev/null 2>&1 ||
        fail "eerl sim --noise $noise --trace"
done
# update u's time_s from each trace, then the pooled sd of log(noisy / clean) over updates 2-40
want_s=$(for seed in 1 2; do
    paste -d' ' \
        <(sed -n 's/.*"type":"update","update":\([0-9]*\),"work":{[^}]*},"time_s":\([0-9.e+-]*\),.*/\1 \2/p' \
            "$tmp/tr-fitted/seed$seed-governor.jsonl") \
        <(sed -n 's/.*"type":"update","update":\([0-9]*\),"work":{[^}]*},"time_s":\([0-9.e+-]*\),.*/\1 \2/p' \
            "$tmp/tr-none/seed$seed-governor.jsonl")
done | awk '$1 == $3 && $1 >= 2 { x = log($2 / $4); n++; sx += x; sxx += x * x }
    END { m = sx / n; printf "%.3f", 100 * sqrt(sxx / n - m * m) }')
[ "$s" = "$want_s" ] || fail "capture-ceiling --within: noise s $s%, by hand from the traces $want_s%"
awk -v s="$s" '$1 ~ /^[0-9]+$/ && NF >= 8 {
        want = 1.645 * s * sqrt(1 / $1 + 1 / 39); if ($2 - want > 0.006 || want - $2 > 0.006) bad = 1
        if ($NF + 1e-9 < $5) bad = 1; if ($NF > best) best = $NF; rows++
        # a share between two settings spends the allowance less the margin exactly
        if ($0 ~ / \+ /) { d = $(NF - 1); sub(/%/, "", d); if (d + 2 - $2 > 0.011 || 2 - $2 + d < -0.011) bad = 1 } }
    /^bound:/ { bound = $2 }
    END { if (rows != 2 || bound + 0 != best || bad) exit 1 }' "$tmp/wout" ||
    fail "capture-ceiling --within: margins, envelope or bound wrong: $(cat "$tmp/wout")"
b9=$(awk '$1 == 9 { print $NF }' "$tmp/wout")
c0=$(awk 'NR == 1 { print $2 }' "$tmp/rows")
awk -v b="$b9" -v c="$c0" 'BEGIN { exit !(b <= c + 1e-9) }' ||
    fail "capture-ceiling --within: K 9's bound $b9 above the margin-0 ceiling $c0"
"$tool" "${wargs[@]}" --margins 0,0.3 >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "capture-ceiling --within with --margins"
expect_in "$tmp/err" "--margins 0,0.3: not with --within" "capture-ceiling: margins with --within are named"
"$tool" "${args[@]}" --noise-seeds 4 >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "capture-ceiling --noise-seeds without --within"
expect_in "$tmp/err" "--noise-seeds 4: only with --within" "capture-ceiling: noise seeds alone are named"
"$tool" "${wargs[@]}" --within 1.5 >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "capture-ceiling --within 1.5"
expect_in "$tmp/err" "--within 1.5" "capture-ceiling: a bad share is named"
"$tool" "${args[@]}" --governor 5,9 >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "capture-ceiling --governor 5,9 without --within"
expect_in "$tmp/err" "--governor '5,9': a list needs --within" "capture-ceiling: a list alone is named"

# --workload: the sweeps and the noise runs take eerl sim's drift scenario; the heading names it
# and the oracle is that work's.
"$tool" "${args[@]}" --margins 0 --workload collapsing >"$tmp/cout" 2>"$tmp/cerr"
expect_rc 0 $? "capture-ceiling --workload collapsing"
expect_in "$tmp/cout" "colocated 32, collapsing work, 40 updates" "capture-ceiling: the workload is named"
[ "$(grep '^oracle on the grid' "$tmp/cout")" != "$(grep '^oracle on the grid' "$tmp/out")" ] ||
    fail "capture-ceiling --workload collapsing: the steady run's oracle: $(cat "$tmp/cout")"
"$tool" "${args[@]}" --workload bogus >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "capture-ceiling --workload bogus"
expect_in "$tmp/err" "unknown workload scenario 'bogus'" "capture-ceiling: a bad workload is named"

"$tool" "${args[@]}" --gen 1900-1800 >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "capture-ceiling --gen 1900-1800"
expect_in "$tmp/err" "--gen '1900-1800'" "capture-ceiling: a reversed range is named"
"$tool" "${args[@]}" --governor 60 >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "capture-ceiling --governor 60"
expect_in "$tmp/err" "--governor 60" "capture-ceiling: too many governor updates are named"
"$tool" "${args[@]}" --margins 0,x >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "capture-ceiling --margins 0,x"
expect_in "$tmp/err" "--margins '0,x'" "capture-ceiling: a bad margin list is named"
"$tool" "${args[@]}" --eerl "$tmp/nope" >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "capture-ceiling --eerl $tmp/nope"
expect_in "$tmp/err" "--eerl $tmp/nope: no eerl program there" "capture-ceiling: a missing eerl is named"
exit $((fails > 0))
