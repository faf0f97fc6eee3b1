#!/usr/bin/env bash
# Resume on the twin (`eerl sim --save-state/--resume-from`, issue 9 item 6): a job segment saves
# its controller state; the next segment resumes from it, runs locked from its first update (no
# calibration, no search), says so on stderr and in its trace, and its trace replays to the same
# decisions. A state learned on another allocation or GPU model, or under another allowance,
# starts a fresh search with a "resume refused" event in the trace; a damaged state file is an
# error naming the file (exit 1); a --resume-from that is not a directory is a usage error (2).
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1

common=(--mode disaggregated --updates 40 --seeds 2 --divergence 0 --json)

# Segment 1: long enough to lock; saves the state of each seed.
"$EERL_BIN" sim --mode disaggregated --alloc 8/32 --updates 120 --seeds 2 --divergence 0 --json \
    --save-state "$tmp/ckpt" >"$tmp/s1.json" 2>"$tmp/s1.err" ||
    { fail "segment 1: exit $?"; sed 's/^/    /' "$tmp/s1.err" >&2; }
for k in 1 2; do
    [ -s "$tmp/ckpt/seed$k-controller.state" ] || fail "segment 1: no state saved for seed $k"
done
jq -e '[.seeds[].after_lock.updates] | all(. > 0)' "$tmp/s1.json" >/dev/null ||
    fail "segment 1 should lock: $(jq -c '[.seeds[].after_lock]' "$tmp/s1.json")"

# Segment 2, same hardware: resumed, locked from update 1, within the allowance.
"$EERL_BIN" sim "${common[@]}" --alloc 8/32 --resume-from "$tmp/ckpt" --trace "$tmp/t2" \
    >"$tmp/s2.json" 2>"$tmp/s2.err" || { fail "segment 2: exit $?"; sed 's/^/    /' "$tmp/s2.err" >&2; }
[ "$(grep -c "resumed from '$tmp/ckpt/seed" "$tmp/s2.err")" -eq 2 ] ||
    fail "segment 2 should say both seeds resumed: $(cat "$tmp/s2.err")"
jq -e '[.seeds[].after_lock.updates] | all(. >= 39)' "$tmp/s2.json" >/dev/null ||
    fail "segment 2 should run locked from update 1: $(jq -c '[.seeds[].after_lock]' "$tmp/s2.json")"
jq -e '.saving_pct > 5' "$tmp/s2.json" >/dev/null ||
    fail "segment 2 should save energy: $(jq -c '{saving_pct,dq_pct}' "$tmp/s2.json")"
for k in 1 2; do
    t="$tmp/t2/seed$k-controller.jsonl"
    jq -se '[.[] | select(.type == "resume")] | length == 1 and .[0].resumed and (.[0].state | length > 100)' \
        "$t" >/dev/null ||
        fail "seed $k: trace has no resume record with the state"
    # No governor update in the resumed segment's first 30 updates (the probe comes later).
    n=$(jq -s '[.[] | select(.type == "update")][0:30] | map(select(.setting.observed.gen_mhz == 0 and .setting.observed.train_mhz == 0)) | length' "$t" 2>/dev/null)
    [ "${n:-x}" = 0 ] || fail "seed $k: $n governor updates among the first 30 after resume"
    "$EERL_BIN" replay --quiet "$t" >"$tmp/replay$k.out" 2>&1 ||
        { fail "seed $k: the resumed trace does not replay"; sed 's/^/    /' "$tmp/replay$k.out" >&2; }
done

# Another allocation, another GPU model, another allowance: fresh search, said where it shows.
check_fresh() { # name, expected text, sim args...
    local name=$1 text=$2
    shift 2
    "$EERL_BIN" sim "${common[@]}" --resume-from "$tmp/ckpt" --trace "$tmp/$name" "$@" \
        >"$tmp/$name.json" 2>"$tmp/$name.err" || { fail "$name: exit $?"; return; }
    grep -q "not resumed: .*$text.*fresh search" "$tmp/$name.err" ||
        fail "$name: stderr should say why it starts fresh: $(grep resum "$tmp/$name.err")"
    grep -q "resume refused: .*$text" "$tmp/$name/seed1-controller.jsonl" ||
        fail "$name: the trace has no 'resume refused' event"
    jq -e '[.seeds[].before_lock.updates] | all(. == null or . >= 15)' "$tmp/$name.json" >/dev/null ||
        fail "$name: should calibrate again: $(jq -c '[.seeds[].before_lock]' "$tmp/$name.json")"
    "$EERL_BIN" replay --quiet "$tmp/$name/seed1-controller.jsonl" >/dev/null 2>&1 ||
        fail "$name: the refused-resume trace does not replay"
}
check_fresh alloc "allocation changed" --alloc 16/32
check_fresh gpu "h200" --alloc 8/32 --gpu h200
check_fresh loss "another controller configuration" --alloc 8/32 --allowed-loss 3%

# A damaged state file: an error naming the file.
mkdir -p "$tmp/bad"
head -c 300 "$tmp/ckpt/seed1-controller.state" >"$tmp/bad/seed1-controller.state"
"$EERL_BIN" sim "${common[@]}" --alloc 8/32 --seeds 1 --resume-from "$tmp/bad" >"$tmp/bad.out" \
    2>"$tmp/bad.err"
rc=$?
[ $rc -eq 1 ] || fail "damaged state: exit $rc, want 1"
grep -q "bad/seed1-controller.state" "$tmp/bad.err" || fail "damaged state: file not named: $(cat "$tmp/bad.err")"
"$EERL_BIN" sim "${common[@]}" --alloc 8/32 --resume-from "$tmp/none" >"$tmp/none.out" 2>"$tmp/none.err"
rc=$?
[ $rc -eq 2 ] || fail "--resume-from of a missing directory: exit $rc, want 2"
grep -q "none" "$tmp/none.err" || fail "missing directory not named: $(cat "$tmp/none.err")"

[ $fails -eq 0 ] && echo "ok" || echo "$fails failure(s)"
[ $fails -eq 0 ]
