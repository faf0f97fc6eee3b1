#!/usr/bin/env bash
# `eerl meter` end to end, on the stand-in NVML library in real time: reports, exit statuses,
# bad input, --clock with restore on normal exit, on SIGTERM and on SIGINT, observe-only.
# Needs EERL_BIN and EERL_NVML_LIBRARY (CTest sets them).
set -u
: "${EERL_BIN:?set EERL_BIN to the eerl binary}"
: "${EERL_NVML_LIBRARY:?set EERL_NVML_LIBRARY to the stand-in libnvidia-ml.so.1}"
py=/usr/bin/python3
[ -x "$py" ] || py=python3

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1
export EERL_FAKE_NVML_STATE="$tmp/state.json"

# Two GPUs at 300 W and 100 W, real time.
write_state() {
    cat >"$EERL_FAKE_NVML_STATE" <<EOF
{"driver_version": "580.159.04", "nvml_version": "13.580.159.04", "virtual_time_ms": null,
 "energy_update_ms": 100, "lock_permitted": ${1:-true},
 "gpus": [
  {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-t0", "memory_clocks_mhz": [2619, 1593],
   "sm_clocks_mhz": {"max": 1980, "min": 345, "step": 15}, "sm_clock_mhz": 1980,
   "power_mw": 300000, "locked_min_mhz": null, "locked_max_mhz": null},
  {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-t1", "memory_clocks_mhz": [2619, 1593],
   "sm_clocks_mhz": {"max": 1980, "min": 345, "step": 15}, "sm_clock_mhz": 1980,
   "power_mw": 100000, "locked_min_mhz": null, "locked_max_mhz": null}
 ]}
EOF
}

# locked range of GPU $1 in the state file, "null-null" when unlocked
lock_of() {
    "$py" -c 'import json,sys; g=json.load(open(sys.argv[1]))["gpus"][int(sys.argv[2])]
print("%s-%s" % (g.get("locked_min_mhz") or "null", g.get("locked_max_mhz") or "null"))' \
        "$EERL_FAKE_NVML_STATE" "$1"
}

# run: expect exit status $1, stderr matching $2 (grep -E, may be empty), then the command
expect() {
    local want=$1 pat=$2
    shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ "$rc" -eq "$want" ] || fail "'$*' exited $rc, want $want; stderr: $(cat "$tmp/err")"
    if [ -n "$pat" ] && ! grep -Eq -- "$pat" "$tmp/err"; then
        fail "'$*': stderr lacks /$pat/: $(cat "$tmp/err")"
    fi
}

write_state

# --- help and bad input ---------------------------------------------------------------------
expect 0 "" "$EERL_BIN" meter --help
grep -q "usage: eerl meter" "$tmp/out" || fail "--help does not print the usage"
expect 2 "no command given" "$EERL_BIN" meter
expect 2 "no command given" "$EERL_BIN" meter --json --
expect 2 "GPU index 9 does not exist \(this machine has 2 GPUs: 0-1\)" \
    "$EERL_BIN" meter --gpus 0,9 -- true
expect 2 "interval-ms 5 is out of range" "$EERL_BIN" meter --interval-ms 5 -- true
expect 2 "interval-ms 'abc' is not" "$EERL_BIN" meter --interval-ms abc -- true
expect 2 "unknown option '--bogus'" "$EERL_BIN" meter --bogus -- true
expect 2 "requested 5000 MHz is outside GPU 0's supported SM clocks 345-1980 MHz" \
    "$EERL_BIN" meter --clock 5000 -- true
expect 2 "requested 100 MHz is outside" "$EERL_BIN" meter --clock 100 -- true
expect 2 "only makes sense with --clock" "$EERL_BIN" meter --observe-only -- true
expect 127 "cannot run 'eerl-no-such-command'" "$EERL_BIN" meter -- eerl-no-such-command
[ "$(lock_of 0)" = "null-null" ] || fail "a refused --clock left GPU 0 locked: $(lock_of 0)"

# a malformed state file: a clear error naming the file, exit 1
echo '{"gpus": [ {"name": ' >"$tmp/bad.json"
EERL_FAKE_NVML_STATE="$tmp/bad.json" "$EERL_BIN" meter -- true >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 1 ] || fail "malformed state file: exit $rc, want 1"
grep -q "bad.json" "$tmp/err" || fail "malformed state file: error does not name it: $(cat "$tmp/err")"

# --- exit status of the command -------------------------------------------------------------
expect 7 "" "$EERL_BIN" meter -- sh -c 'exit 7'
grep -q "exited with status 7" "$tmp/out" || fail "report lacks the exit status: $(cat "$tmp/out")"
expect 143 "" "$EERL_BIN" meter -- sh -c 'kill -TERM $$'
grep -q "killed by signal 15" "$tmp/out" || fail "report lacks the signal: $(cat "$tmp/out")"

# --- the report: energy matches power x time within the counter's 100 ms granularity -----------
# Bounds that hold whatever the machine's speed or load: eerl's marks come before the command
# starts and after it ends (so at least its 1 s apart) and within eerl's own lifetime (s0..s1).
s0=$(date +%s.%N)
expect 0 "" "$EERL_BIN" meter --json --interval-ms 50 --output "$tmp/r.json" -- sleep 1
s1=$(date +%s.%N)
[ -s "$tmp/out" ] && fail "--output still printed to stdout: $(cat "$tmp/out")"
"$py" - "$tmp/r.json" "$s0" "$s1" <<'EOF' || fail "JSON report check failed"
import json, sys
r = json.load(open(sys.argv[1]))
life = float(sys.argv[3]) - float(sys.argv[2])
d = r["duration_s"]
assert r["exit_status"] == 0 and r["signal"] is None, r
assert 1.0 <= d <= life, (d, life)
assert [g["index"] for g in r["gpus"]] == [0, 1], r["gpus"]
assert [g["uuid"] for g in r["gpus"]] == ["GPU-t0", "GPU-t1"], r["gpus"]
for g, w in zip(r["gpus"], (300.0, 100.0)):
    # the counter reads at the marks span the command (>= 1 s), +-100 ms of counter steps; a
    # last mark the counter has not moved for adds power over at most eerl's lifetime
    assert w * (1.0 - 0.1) - 1e-6 <= g["energy_j"] <= w * (2 * life + 0.1) + 1e-6, (g, w, d, life)
    assert abs(g["peak_w"] - w) < 1e-6, g
    assert abs(g["mean_w"] - g["energy_j"] / d) < 1e-6, g
    assert g["flags"] == [], g
t = r["total"]
assert abs(t["energy_j"] - sum(g["energy_j"] for g in r["gpus"])) < 1e-6, t
assert abs(t["peak_w"] - 400.0) < 1e-6, t
assert r["samples"] >= 3, r["samples"]  # the two marks and the sampler thread's ticks between
EOF
# A command that cannot run leaves the earlier report as it was, and no temp file beside it.
cp "$tmp/r.json" "$tmp/r.before"
expect 127 "" "$EERL_BIN" meter --json --output "$tmp/r.json" -- "$tmp/no-such-command"
cmp -s "$tmp/r.json" "$tmp/r.before" || fail "--output: the old report was lost when the command could not run"
ls "$tmp"/r.json.tmp.* >/dev/null 2>&1 && fail "--output: a temp file was left: $(ls "$tmp"/r.json.tmp.*)"
expect 0 "" "$EERL_BIN" meter --json -o "$tmp/o.json" -- true
jq -e '.gpus | length == 2' "$tmp/o.json" >/dev/null || fail "meter -o (as report's -o) wrote no report"
expect 0 "" "$EERL_BIN" meter --gpus 1 -- sleep 0.3
grep -Eq "^1 +[0-9.]+ +[0-9.]+ +100\.0 " "$tmp/out" || fail "text report for --gpus 1: $(cat "$tmp/out")"
grep -Eq "^0 " "$tmp/out" && fail "--gpus 1 reported GPU 0: $(cat "$tmp/out")"

# --- --clock: locked while the command runs, reset afterwards ----------------------------------
expect 0 "" "$EERL_BIN" meter --clock 1507 -- sh -c 'cp "$EERL_FAKE_NVML_STATE" "$0"' "$tmp/during.json"
"$py" -c 'import json,sys; g=json.load(open(sys.argv[1]))["gpus"]
assert [(x["locked_min_mhz"], x["locked_max_mhz"]) for x in g] == [(1500, 1500)] * 2, g' \
    "$tmp/during.json" || fail "--clock 1507 did not lock both GPUs at 1500 MHz during the command"
[ "$(lock_of 0)-$(lock_of 1)" = "null-null-null-null" ] || fail "--clock not reset after the command"
grep -q "locked at 1500 MHz (requested 1507 MHz)" "$tmp/out" || fail "report lacks the clock: $(cat "$tmp/out")"

# --- --clock and a signal to eerl: forwarded, clocks reset, 128 + signal ------------------------
for sig in TERM INT; do
    write_state
    rm -f "$tmp/started"
    "$EERL_BIN" meter --clock 1200 -- sh -c 'touch "$0"; exec sleep 30' "$tmp/started" \
        >"$tmp/out" 2>"$tmp/err" &
    pid=$!
    # the command runs (so eerl is past its set-up); a hang guard, not a speed check
    wait_until 120 test -e "$tmp/started" || fail "SIG$sig: the command never started"
    [ "$(lock_of 0)" = "1200-1200" ] || fail "SIG$sig: GPU 0 was not locked at 1200 while the command ran"
    kill -"$sig" "$pid"
    wait "$pid"
    rc=$?
    num=$(kill -l "$sig")
    [ "$rc" -eq $((128 + num)) ] || fail "SIG$sig: eerl meter exited $rc, want $((128 + num))"
    [ "$(lock_of 0)-$(lock_of 1)" = "null-null-null-null" ] ||
        fail "SIG$sig: clocks not reset: $(lock_of 0) $(lock_of 1)"
    grep -q "killed by signal $num" "$tmp/out" || fail "SIG$sig: report: $(cat "$tmp/out")"
done

# --- observe-only never writes ------------------------------------------------------------------
write_state
before=$(stat -c %i "$EERL_FAKE_NVML_STATE")
expect 0 "" "$EERL_BIN" meter --clock 1200 --observe-only -- sh -c 'cp "$EERL_FAKE_NVML_STATE" "$0"' "$tmp/during.json"
grep -q '"locked_min_mhz": null' "$tmp/during.json" || fail "observe-only locked a clock"
[ "$(stat -c %i "$EERL_FAKE_NVML_STATE")" = "$before" ] || fail "observe-only rewrote the state file"
grep -q "would have been locked at 1200 MHz" "$tmp/out" || fail "observe-only report: $(cat "$tmp/out")"

# --- no permission: the message says what to do -------------------------------------------------
write_state false
expect 1 "CAP_SYS_ADMIN.*observe-only" "$EERL_BIN" meter --clock 1200 -- true

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed" >&2
    exit 1
fi
echo "test_cli_meter: all checks passed"
