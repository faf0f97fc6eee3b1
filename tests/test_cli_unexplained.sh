#!/usr/bin/env bash
# `eerl analyze --forward-test` shows, per trace, what the governor predictor leaves of the update
# time unexplained where the trace's controller calibrated (the figure a session reports once,
# runtime/unexplained.c): on the committed H200 run of TRL's GRPOTrainer with transformers'
# generation (host-bound decoding) it is 21.9% of the update time, a trial would need 480 updates,
# and the session's message follows; on the committed H200 run with vLLM (colocated, 200 prompts)
# it is 2.1%, 5 updates, and nothing more is said. JSON carries the same figures.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"
: "${EERL_SOURCE_DIR:?EERL_SOURCE_DIR must name the source tree}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1

data=$EERL_SOURCE_DIR/data/h200
host=$data/trl-2026-12-01/trl-grpo/trace.jsonl
engine=$data/grpo-2026-11-30/colocated-p200-s0/trace.jsonl

"$EERL_BIN" analyze --forward-test "$host" >"$tmp/host.txt" 2>&1
expect_rc 0 $? "analyze --forward-test on the TRL trace"
expect_in "$tmp/host.txt" "calibration (update 14, 15 governor updates): the governor predictor leaves 21.9% of the update time unexplained" "the TRL trace's figure"
expect_in "$tmp/host.txt" "a trial needs about 480 updates" "the TRL trace's updates per trial"
expect_in "$tmp/host.txt" "the work does not explain the time:" "the TRL trace's message"
expect_in "$tmp/host.txt" "transformers' generate" "the usual cause"
expect_in "$tmp/host.txt" "the paper strategy's trials take 3: their verdicts on clock changes would be chance" "what it means for the trace's strategy"

"$EERL_BIN" analyze --forward-test "$engine" >"$tmp/engine.txt" 2>&1
expect_rc 0 $? "analyze --forward-test on the vLLM trace"
expect_in "$tmp/engine.txt" "leaves 2.1% of the update time unexplained" "the vLLM trace's figure"
expect_in "$tmp/engine.txt" "a trial needs about 5 updates" "the vLLM trace's updates per trial"
if grep -qF "the work does not explain the time" "$tmp/engine.txt"; then
    fail "the vLLM trace is said not to explain its time: $(cat "$tmp/engine.txt")"
fi

"$EERL_BIN" analyze --forward-test --json "$host" "$engine" >"$tmp/both.json" 2>&1
expect_rc 0 $? "analyze --forward-test --json"
jq -e '.traces[0].calibration | .governor_updates == 15 and .update == 14 and
       (.unexplained_share * 1000 | round) == 219 and .trial_updates_needed == 480 and
       .trial_updates_max == 3 and .strategy == "paper" and .work_explains_time == false' \
    "$tmp/both.json" >/dev/null || fail "JSON figures of the TRL trace: $(cat "$tmp/both.json")"
jq -e '.traces[1].calibration | .work_explains_time == true and .trial_updates_needed == 5 and
       .unexplained_share < .constant_share' "$tmp/both.json" >/dev/null ||
    fail "JSON figures of the vLLM trace: $(cat "$tmp/both.json")"

exit $((fails > 0))
