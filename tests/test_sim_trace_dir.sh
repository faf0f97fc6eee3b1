#!/usr/bin/env bash
# eerl sim --trace DIR never destroys a trace: a rerun into a directory that holds an earlier
# run's traces is refused up front, naming the file, and leaves every byte there as it was; a
# run into a fresh directory writes both traces of each seed.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"

. "$(dirname "$0")/testlib.sh" || exit 1

"$EERL_BIN" sim --seeds 2 --updates 20 --trace "$tmp/runs" >/dev/null 2>"$tmp/err"
expect_rc 0 $? "a first run into a fresh directory"
for f in seed1-governor seed1-controller seed2-governor seed2-controller; do
    [ -s "$tmp/runs/$f.jsonl" ] || fail "no trace $f.jsonl"
done
sums=$(cd "$tmp/runs" && md5sum ./* | sort)
"$EERL_BIN" sim --seeds 2 --updates 20 --trace "$tmp/runs" >/dev/null 2>"$tmp/err"
expect_rc 1 $? "a rerun into the same directory"
expect_in "$tmp/err" "'$tmp/runs/seed1-governor.jsonl' exists from an earlier run: eerl never overwrites a trace" \
    "names the earlier trace"
[ "$(cd "$tmp/runs" && md5sum ./* | sort)" = "$sums" ] ||
    fail "a refused rerun changed or removed the earlier traces"
# seed 2's traces alone there: still refused, seed 1 not written
mkdir "$tmp/half" && cp "$tmp/runs/seed2-controller.jsonl" "$tmp/half/"
"$EERL_BIN" sim --seeds 2 --updates 20 --trace "$tmp/half" >/dev/null 2>"$tmp/err"
expect_rc 1 $? "a run whose second seed's trace exists"
[ "$(ls "$tmp/half")" = "seed2-controller.jsonl" ] || fail "the refused run left: $(ls -a "$tmp/half")"

[ $fails -eq 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
echo "ok"
