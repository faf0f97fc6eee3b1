#!/usr/bin/env bash
# Exact replay across changes to the controller: every committed trace — the `eerl sim --trace`
# fixtures of every mode and strategy in tests/fixtures/replay/ (made before the core was
# reorganised) and every real H200 trace under data/h200/ — replays through `eerl replay` with
# the same events and requests it recorded (exit 0, "0 mismatches"), and each one compared at
# least one recorded event. A controller change that alters any decision fails here, naming the
# trace and the first mismatches.
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
[ ${#fixtures[@]} -ge 48 ] || fail "expected at least 48 fixtures in tests/fixtures/replay, found ${#fixtures[@]}"
for f in "${fixtures[@]}"; do
    gzip -dc "$f" | "$EERL_BIN" replay --quiet - >"$tmp/out" 2>&1
    check "${f#"$root"/}" "$tmp/out" $?
done

mapfile -t h200 < <(find "$root/data/h200" -name trace.jsonl | sort)
[ ${#h200[@]} -ge 1 ] || fail "no data/h200/**/trace.jsonl found"
for f in "${h200[@]}"; do
    "$EERL_BIN" replay --quiet "$f" >"$tmp/out" 2>&1
    check "${f#"$root"/}" "$tmp/out" $?
done

echo "replayed $n traces"
exit $((fails > 0))
