#!/usr/bin/env bash
# A model from its description (`eerl sim --model-file FILE`, `eerl sweep --model-file FILE`):
# the embedded mistral-nemo-12b written out as a user's file gives figure for figure what
# `--model mistral-nemo-12b` gives (one path for both); the JSON names the model the file names;
# a bad file is refused with exit 2 and a message naming the file, the field and its value; a
# missing file names the file.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1

params="$EERL_SOURCE_DIR/data/twin/params.json"
jq '.described["mistral-nemo-12b"]' "$params" >"$tmp/mistral.json"
args=(--mode drained --alloc 8/16 --size M --updates 40 --seeds 2 --strategy eerl --json)

"$EERL_BIN" sim --model mistral-nemo-12b "${args[@]}" >"$tmp/named.json" 2>"$tmp/named.err"
expect_rc 0 $? "eerl sim --model mistral-nemo-12b"
"$EERL_BIN" sim --model-file "$tmp/mistral.json" "${args[@]}" >"$tmp/file.json" 2>"$tmp/file.err"
expect_rc 0 $? "eerl sim --model-file (mistral-nemo-12b's description)"
if ! diff <(jq -S 'del(.wall_s)' "$tmp/named.json") <(jq -S 'del(.wall_s)' "$tmp/file.json") \
    >"$tmp/diff"; then
    fail "--model-file with mistral-nemo-12b's description differs from --model mistral-nemo-12b:"
    head -n 20 "$tmp/diff" >&2
fi
jq -e '.model == "mistral-nemo-12b"' "$tmp/file.json" >/dev/null ||
    fail "the JSON does not name the model the file names: $(jq -c .model "$tmp/file.json")"

# A user's own model, renamed: its name reaches the output; eerl sweep takes the file too.
jq '.name = "my-dense-12b"' "$tmp/mistral.json" >"$tmp/mine.json"
"$EERL_BIN" sim --model-file "$tmp/mine.json" "${args[@]}" >"$tmp/mine.out" 2>"$tmp/mine.err"
expect_rc 0 $? "eerl sim --model-file (renamed)"
jq -e '.model == "my-dense-12b"' "$tmp/mine.out" >/dev/null || fail "renamed model not named"
"$EERL_BIN" sweep --model-file "$tmp/mine.json" --mode inflight --alloc 8/16 --size M \
    --pairs Gov/1425 --seeds 2 --csv >"$tmp/sweep.csv" 2>"$tmp/sweep.err"
expect_rc 0 $? "eerl sweep --model-file"
grep -q '^Gov,1425,' "$tmp/sweep.csv" || fail "eerl sweep --model-file printed no row"

# A bad description: exit 2, the file, the field and the value named.
jq '.layers = 0' "$tmp/mistral.json" >"$tmp/bad.json"
"$EERL_BIN" sim --model-file "$tmp/bad.json" "${args[@]}" >/dev/null 2>"$tmp/bad.err"
expect_rc 2 $? "eerl sim --model-file with layers 0"
grep -q "bad.json" "$tmp/bad.err" && grep -q "'layers' is 0" "$tmp/bad.err" ||
    fail "the error does not name the file, the field and its value: $(cat "$tmp/bad.err")"
jq '.workload.sizes.M = [64, 8, 500]' "$tmp/mistral.json" >"$tmp/bad2.json"
"$EERL_BIN" sweep --model-file "$tmp/bad2.json" --pairs Gov/1425 >/dev/null 2>"$tmp/bad2.err"
expect_rc 2 $? "eerl sweep --model-file with a batch that is not prompts x responses"
grep -q "'workload.sizes.M' is \[64, 8, 500\]" "$tmp/bad2.err" ||
    fail "the error does not name the size and its value: $(cat "$tmp/bad2.err")"
"$EERL_BIN" sim --model-file "$tmp/none.json" "${args[@]}" >/dev/null 2>"$tmp/none.err"
expect_rc 2 $? "eerl sim --model-file with a missing file"
grep -q "none.json" "$tmp/none.err" || fail "missing file not named: $(cat "$tmp/none.err")"

exit $((fails > 0))
