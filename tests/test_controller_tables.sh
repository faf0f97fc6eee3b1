#!/usr/bin/env bash
# tools/controller-tables: a real run of its tools on one mode and one seed (--print) prints both
# blocks with that mode's rows; writing a page replaces only the two fenced blocks after their
# markers, from saved outputs; bad input (a subset of modes without --print, a missing marker, a
# missing saved file, a saved output without every mode) and a failing tool exit non-zero,
# naming what was wrong, and leave the page byte for byte as it was.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1

tool="$(dirname "$0")/../tools/controller-tables"
bench="$(dirname "$EERL_BIN")/bench/bench_controllers"

# A real run on one mode. The sanitizer builds have no benchmarks (EERL_BUILD_BENCH=OFF): there
# the capture table comes from a saved output and only prior-bench runs; the plain build's run of
# this test runs both.
printf '%s\n' "mode            upd. workload   | bound    K |  eerl within /bound | paper /bound" \
    "colocated        107 steady     | 0.831   15 | 0.779   8/8   0.937 | 0.615  0.740 | no   yes" \
    >"$tmp/cap-colocated"
real=(--eerl "$EERL_BIN" --modes colocated --seeds 1 --jobs 1 --print)
if [ -x "$bench" ]; then
    real+=(--bench "$bench")
else
    echo "no $bench (a build without benchmarks): the capture table is read from a saved output"
    real+=(--capture-from "$tmp/cap-colocated")
fi
"$tool" "${real[@]}" >"$tmp/print" 2>"$tmp/print.err"
expect_rc 0 $? "controller-tables --print"
expect_in "$tmp/print" "<!-- tools/controller-tables: capture-table -->" "print: capture block"
expect_in "$tmp/print" "<!-- tools/controller-tables: prior-bench -->" "print: prior block"
n=$(grep -c '^colocated ' "$tmp/print")
want=7 # capture-table: 3 steady + 3 drifting rows; prior-bench: 1
[ -x "$bench" ] || want=2
[ "$n" -eq "$want" ] || fail "print: $n colocated rows, expected $want: $(cat "$tmp/print")"
grep -qE '^(disaggregated|drained|inflight) ' "$tmp/print" &&
    fail "print: rows of a mode not asked for: $(cat "$tmp/print")"

# block NAME FILE: the lines of the fenced block after NAME's marker.
block() { awk -v m="<!-- tools/controller-tables: $1 -->" '$0 == m { on = 1; next }
    on && /^```$/ { if (++f == 2) exit; next } on' "$2"; }

# Saved outputs of every mode (a colocated row under each mode's name).
for f in cap pri; do
    src="$tmp/print"
    : >"$tmp/$f-all"
    name=capture-table
    [ $f = pri ] && name=prior-bench
    for m in colocated disaggregated drained inflight; do
        block "$name" "$src" | grep '^colocated ' | head -1 |
            sed "s/^colocated /$m /" >>"$tmp/$f-all"
    done
done
[ "$(wc -l <"$tmp/cap-all")" -eq 4 ] && [ "$(wc -l <"$tmp/pri-all")" -eq 4 ] ||
    fail "saved outputs: 4 rows each expected: $(cat "$tmp/cap-all" "$tmp/pri-all")"

cat >"$tmp/page.md" <<'EOF'
# A page

Text before.

<!-- tools/controller-tables: capture-table -->
```
old capture rows
```

Text between, kept.

<!-- tools/controller-tables: prior-bench -->
```
old prior rows
more old prior rows
```

Text after.
EOF
cp "$tmp/page.md" "$tmp/page.orig"
saved=(--doc "$tmp/page.md" --capture-from "$tmp/cap-all" --prior-from "$tmp/pri-all")
"$tool" "${saved[@]}" >"$tmp/w.out" 2>"$tmp/w.err"
expect_rc 0 $? "controller-tables writing from saved outputs"
grep -q "old" "$tmp/page.md" && fail "write: an old block line is left: $(cat "$tmp/page.md")"
for m in colocated disaggregated drained inflight; do
    [ "$(grep -c "^$m " "$tmp/page.md")" -eq 2 ] || fail "write: $m rows: $(cat "$tmp/page.md")"
done
# Everything outside the blocks is as it was.
outside() { awk '/^<!-- tools\/controller-tables/ { skip = 1; print; next }
    skip && /^```$/ { n++; if (n == 2) { skip = 0; n = 0 } ; next } !skip' "$1"; }
outside "$tmp/page.orig" >"$tmp/outside.orig"
outside "$tmp/page.md" >"$tmp/outside.new"
diff "$tmp/outside.orig" "$tmp/outside.new" >"$tmp/outside.diff" ||
    fail "write: text outside the blocks changed: $(cat "$tmp/outside.diff")"

# Bad input: exit 2 naming it, the page untouched.
cp "$tmp/page.md" "$tmp/page.good"
check_refused() { # WANT_RC TEXT WHAT ARGS...
    local want=$1 text=$2 what=$3
    shift 3
    "$tool" "$@" >"$tmp/b.out" 2>"$tmp/b.err"
    expect_rc "$want" $? "$what"
    expect_in "$tmp/b.err" "$text" "$what"
    cmp -s "$tmp/page.md" "$tmp/page.good" || fail "$what: the page changed"
}
check_refused 2 "--modes colocated" "a subset without --print" "${saved[@]}" --modes colocated
check_refused 2 "--capture-from $tmp/nope" "a missing saved file" --doc "$tmp/page.md" \
    --capture-from "$tmp/nope" --prior-from "$tmp/pri-all"
grep '^colocated ' "$tmp/cap-all" >"$tmp/cap-one"
check_refused 2 "rows of colocated only" "a saved output of one mode" --doc "$tmp/page.md" \
    --capture-from "$tmp/cap-one" --prior-from "$tmp/pri-all"
check_refused 1 "prior-bench failed" "a failing tool" --doc "$tmp/page.md" --capture-from \
    "$tmp/cap-all" --eerl "$tmp/no-eerl" --seeds 1
sed '/prior-bench -->/d' "$tmp/page.good" >"$tmp/page.md"
cp "$tmp/page.md" "$tmp/page.good"
check_refused 2 "no marker line '<!-- tools/controller-tables: prior-bench -->'" \
    "a missing marker" "${saved[@]}"

exit $((fails > 0))
