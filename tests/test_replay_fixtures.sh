#!/usr/bin/env bash
# Exact replay across changes to the controller: every `eerl sim --trace` fixture of every mode and
# strategy in tests/fixtures/replay/ replays through `eerl replay` with the same events and
# requests it recorded (exit 0, "0 mismatches"), and each one compared at least one recorded
# event. A controller change that alters any decision fails here, naming the trace and the first
# mismatches. A trace an older revision of the controller decided is refused, exit 3, with a
# message naming the revision and the eerl to replay it with (docs/trace-format.md): the kept
# fixture of tests/fixtures/replay-refused/ and the real H200 traces under data/h200/, whose
# controllers (paper_revision 0, eerl_revision 0) this eerl no longer holds.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1

root=$(cd "$(dirname "$0")/.." && pwd)
n=0
check() { # check NAME FILE-OF-REPLAY-OUTPUT RC
    local summary
    summary=$(tail -n 1 "$2")
    n=$((n + 1))
    if [ "$3" -ne 0 ] || ! grep -qE ', [1-9][0-9]* events, 0 mismatches;' <<<"$summary"; then
        fail "$1: replay exit $3, expected 0 with events and 0 mismatches; output:"
        head -n 20 "$2" | sed 's/^/    /' >&2
    fi
}

shopt -s nullglob
fixtures=("$root"/tests/fixtures/replay/*.jsonl.gz)
[ ${#fixtures[@]} -ge 69 ] || fail "expected at least 69 fixtures in tests/fixtures/replay, found ${#fixtures[@]}"
for f in "${fixtures[@]}"; do
    gzip -dc "$f" | "$EERL_BIN" replay --quiet - >"$tmp/out" 2>&1
    check "${f#"$root"/}" "$tmp/out" $?
done

refused() { # refused NAME FILE-OF-REPLAY-OUTPUT RC KEY REVISION
    n=$((n + 1))
    if [ "$3" -ne 3 ] ||
        ! grep -qF "this trace was decided by $4 $5; this eerl" "$2" ||
        ! grep -qF "replay it with the eerl version that wrote it (its header's producer: eerl " "$2"; then
        fail "$1: replay exit $3, expected 3 and the refusal naming $4 $5; output:"
        head -n 5 "$2" | sed 's/^/    /' >&2
    fi
}

old=$root/tests/fixtures/replay-refused/disaggregated-eerl-revision2-seed5.jsonl.gz
gzip -dc "$old" | "$EERL_BIN" replay --quiet - >"$tmp/out" 2>&1
refused "${old#"$root"/}" "$tmp/out" $? eerl_revision 2

mapfile -t h200 < <(find "$root/data/h200" -name trace.jsonl | sort)
[ ${#h200[@]} -ge 1 ] || fail "no data/h200/**/trace.jsonl found"
for f in "${h200[@]}"; do
    "$EERL_BIN" replay --quiet "$f" >"$tmp/out" 2>&1
    rc=$?
    key=paper_revision
    grep -q '"strategy":"eerl"' <(head -n 1 "$f") && key=eerl_revision
    refused "${f#"$root"/}" "$tmp/out" $rc $key 0
done

echo "replayed or refused $n traces"
exit $((fails > 0))
