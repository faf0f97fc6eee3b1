#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for SECONDS, one job at a
# time, starting from the committed seeds in fuzz/corpus/<target>/ (the grown corpus goes to the
# work dir, never into the repository). Prints executions and crashes per target; exits 1 if a
# target crashed, leaked or timed out (or libFuzzer failed), so `tools/run test` can run it.
#   fuzz/run.sh SECONDS [message|policy ...]
#   FUZZ_DIR=DIR   work dir (default: build-fuzz/ at the repository root)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
secs=${1:?usage: fuzz/run.sh SECONDS [message|policy ...]}
shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(message policy)
case $secs in '' | *[!0-9]*) echo "fuzz/run.sh: SECONDS '$secs' is not a whole number" >&2; exit 2 ;; esac
command -v clang >/dev/null || { echo "fuzz/run.sh: clang not found: apt-get install clang" >&2; exit 1; }
work=${FUZZ_DIR:-$here/build-fuzz}
bad=0
mkdir -p "$work"
flags=(-g -O1 -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=all -I"$here/include" -I"$here/src" -I"$here/programs/eerld")
jansson=$(pkg-config --cflags --libs jansson)
inih=$(pkg-config --cflags --libs inih 2>/dev/null) || { echo "fuzz/run.sh: apt-get install libinih-dev" >&2; exit 1; }
for t in "${targets[@]}"; do
    case $t in
    message) srcs=("$here/fuzz/fuzz_message.c" "$here/src/agent/protocol.c" "$here/src/common/error.c"); libs=$jansson ;;
    policy) srcs=("$here/fuzz/fuzz_policy.c" "$here/programs/eerld/policy.c" "$here/src/common/safefile.c"); libs=$inih ;;
    *) echo "fuzz/run.sh: unknown target '$t' (message, policy)" >&2; exit 2 ;;
    esac
    # shellcheck disable=SC2086
    clang "${flags[@]}" "${srcs[@]}" $libs -o "$work/fuzz_$t"
    mkdir -p "$work/corpus_$t" "$work/artifacts_$t"
    cp -n "$here/fuzz/corpus/$t/"* "$work/corpus_$t/" 2>/dev/null || true
    log="$work/fuzz_$t.log"
    rc=0
    (cd "$work" && "./fuzz_$t" -max_total_time="$secs" -jobs=1 -workers=1 -max_len=65536 \
        -artifact_prefix="$work/artifacts_$t/" -print_final_stats=1 "$work/corpus_$t") >"$log" 2>&1 || rc=$?
    # With -jobs=1 libFuzzer writes the run to fuzz-0.log in the work dir.
    [ -s "$work/fuzz-0.log" ] && cat "$work/fuzz-0.log" >>"$log" && rm -f "$work/fuzz-0.log"
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo 0)
    crashes=$(find "$work/artifacts_$t" -type f | wc -l)
    echo "fuzz_$t: ${secs}s, ${execs} executions, ${crashes} crash/leak/timeout artifacts, exit $rc (log $log)"
    if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
        bad=1
        tail -n 30 "$log" >&2
    fi
done
exit $bad
