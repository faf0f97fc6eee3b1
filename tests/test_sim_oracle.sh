#!/usr/bin/env bash
# The oracle that `eerl sim` and bench_controllers measure capture against is the best static
# setting: on two of the bench's configurations (2 matched seeds, divergence 0), no pair of a
# 15 MHz grid within 90 MHz of the oracle's setting (every supported clock there, `eerl sweep`
# on the same seeds and updates) meets the allowance with a larger saving. The search it
# replaced (a 45 MHz grid refined within 30 MHz of its best) failed this in colocated mode:
# 1815/1305 at 10.17% where 1800/1320 saves 10.51% within 2%.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1

# mode, allocation, size, updates
for c in "colocated 32 M 107" "drained 8/24 S 175"; do
    set -- $c
    mode=$1 alloc=$2 size=$3 updates=$4
    "$EERL_BIN" sim --mode "$mode" --alloc "$alloc" --size "$size" --updates "$updates" \
        --seeds 2 --divergence 0 --json >"$tmp/$mode.json" 2>"$tmp/$mode.err"
    rc=$?
    expect_rc 0 $rc "eerl sim --mode $mode"
    [ $rc -eq 0 ] || { sed 's/^/    /' "$tmp/$mode.err" >&2; continue; }
    g=$(jq -r '.oracle.setting.gen_mhz' "$tmp/$mode.json")
    t=$(jq -r '.oracle.setting.train_mhz' "$tmp/$mode.json")
    sav=$(jq -r '.oracle.saving_pct' "$tmp/$mode.json")
    case "$g$t" in
    *[!0-9]*) fail "$mode: the oracle should lower both clocks here: $g/$t"; continue ;;
    esac
    pairs=
    for dg in -90 -75 -60 -45 -30 -15 0 15 30 45 60 75 90; do
        for dt in -90 -75 -60 -45 -30 -15 0 15 30 45 60 75 90; do
            a=$((g + dg)) b=$((t + dt))
            [ $a -le 1980 ] && [ $b -le 1980 ] && pairs="$pairs${pairs:+,}$a/$b"
        done
    done
    "$EERL_BIN" sweep --model qwen3-30b-a3b --gpu h100 --mode "$mode" --alloc "$alloc" \
        --size "$size" --pairs "$pairs" --seeds 2 --updates "2-$updates" --divergence 0 \
        --csv >"$tmp/$mode.csv" 2>"$tmp/$mode.sweep.err"
    expect_rc 0 $? "eerl sweep around $g/$t ($mode)"
    # gen_mhz,train_mhz,dq_pct,saving_pct,seeds; the sweep prints two decimals and its figure for
    # the oracle's own pair differs from the oracle's by up to 0.01 (rounding and summation)
    better=$(awk -F, -v s="$sav" 'NR > 1 && $3 >= -2 && $4 > s + 0.02 { print $1 "/" $2 " " $4 "%" }' \
        "$tmp/$mode.csv")
    [ -z "$better" ] || fail "$mode: the oracle $g/$t ($sav%) is beaten within 2% by: $better"
    n=$(($(wc -l <"$tmp/$mode.csv") - 1))
    [ "$n" -ge 150 ] || fail "$mode: the sweep covered $n pairs"
done
exit $((fails > 0))
