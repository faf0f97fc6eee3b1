#!/usr/bin/env bash
# `eerl devices` against the stand-in NVML library: the table and the JSON carry what the state
# file says (UUIDs, names, clock ranges, power, energy, throttle reasons, unsupported readings),
# and bad input (unknown flag, no driver, malformed state, a lost GPU) gives a clear message and
# the documented exit status. Needs EERL_BIN and EERL_NVML_LIBRARY (ctest sets them).
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"
: "${EERL_NVML_LIBRARY:?EERL_NVML_LIBRARY must name the stand-in libnvidia-ml.so.1}"
export EERL_NVML_LIBRARY

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1

# expect_rc WANT GOT WHAT
# expect_in FILE TEXT WHAT
state="$tmp/state.json"
cat >"$state" <<'EOF'
{
  "driver_version": "580.159.04",
  "nvml_version": "13.580.159.04",
  "virtual_time_ms": 5000,
  "energy_update_ms": 100,
  "lock_permitted": true,
  "gpus": [
    {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0a0a0a0a-1111-2222-3333-444444444444",
     "memory_clocks_mhz": [2619, 1593], "sm_clocks_mhz": {"max": 1980, "min": 345, "step": 15},
     "sm_clock_mhz": 1755, "power_mw": 312500, "energy_start_mj": 123456789,
     "throttle_reasons": 4},
    {"name": "NVIDIA Odd GPU", "uuid": "GPU-0b0b0b0b-1111-2222-3333-444444444444",
     "memory_clocks_mhz": [5001], "sm_clocks_mhz": [1200, 1500, 1005, 1980],
     "power_mw": 65000, "throttle_reasons": 0, "energy_supported": false}
  ],
  "faults": []
}
EOF
export EERL_FAKE_NVML_STATE="$state"

# --- the table
"$EERL_BIN" devices >"$tmp/out" 2>"$tmp/err"
expect_rc 0 $? "eerl devices"
expect_in "$tmp/out" "GPU-0a0a0a0a-1111-2222-3333-444444444444" "table: UUID of GPU 0"
expect_in "$tmp/out" "GPU-0b0b0b0b-1111-2222-3333-444444444444" "table: UUID of GPU 1"
expect_in "$tmp/out" "NVIDIA H100 80GB HBM3" "table: name"
expect_in "$tmp/out" "345-1980/15" "table: regular clock range"
expect_in "$tmp/out" "4 values 1005-1980" "table: irregular clock table"
expect_in "$tmp/out" "312.5" "table: power"
expect_in "$tmp/out" "123456.789" "table: energy counter in J"
expect_in "$tmp/out" "sw_power_cap" "table: throttle reason"
row0=$(grep '^0 ' "$tmp/out")
row1=$(grep '^1 ' "$tmp/out")
[[ "$row0" == *" 1755 "* ]] || fail "table: GPU 0 SM clock 1755 missing in '$row0'"
[[ "$row1" == *" n/a "* ]] || fail "table: GPU 1 energy should be n/a: '$row1'"
[[ "$row1" == *" 1980 "* ]] || fail "table: GPU 1 SM clock defaults to its top clock: '$row1'"
[ "$(wc -l <"$tmp/out")" -eq 3 ] || fail "table: expected a header and 2 rows"
[ -s "$tmp/err" ] && fail "table: unexpected stderr: $(cat "$tmp/err")"

# --- JSON
"$EERL_BIN" devices --json >"$tmp/json" 2>"$tmp/err"
expect_rc 0 $? "eerl devices --json"
python3 - "$tmp/json" <<'EOF' || fail "JSON content (see above)"
import json, sys
d = json.load(open(sys.argv[1]))
assert isinstance(d, list) and len(d) == 2, d
a, b = d
assert a["index"] == 0 and b["index"] == 1
assert a["lost"] is False and b["lost"] is False
assert a["uuid"] == "GPU-0a0a0a0a-1111-2222-3333-444444444444", a["uuid"]
assert a["name"] == "NVIDIA H100 80GB HBM3"
assert a["sm_clock_range_mhz"] == {"min": 345, "max": 1980, "step": 15, "count": 110}, a
assert a["supported_sm_clocks_mhz"][0] == 1980 and a["supported_sm_clocks_mhz"][-1] == 345
assert a["sm_clock_mhz"] == 1755
assert abs(a["power_w"] - 312.5) < 1e-9
assert a["energy_mj"] == 123456789 and abs(a["energy_j"] - 123456.789) < 1e-6
assert a["throttle_reasons"] == {"mask": 4, "names": ["sw_power_cap"]}, a["throttle_reasons"]
assert b["sm_clock_range_mhz"] == {"min": 1005, "max": 1980, "step": None, "count": 4}, b
assert b["supported_sm_clocks_mhz"] == [1980, 1500, 1200, 1005]
assert b["energy_mj"] is None and b["energy_j"] is None
assert b["throttle_reasons"] == {"mask": 0, "names": []}
EOF

# --- the energy column follows virtual time: 1 s at 312.5 W more
python3 - "$state" <<'EOF'
import json, os, sys
p = sys.argv[1]
d = json.load(open(p))
d["virtual_time_ms"] = 6000
open(p + ".w", "w").write(json.dumps(d))
os.rename(p + ".w", p)
EOF
"$EERL_BIN" devices --json >"$tmp/json" 2>"$tmp/err"
expect_rc 0 $? "eerl devices --json at t+1s"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d[0]["energy_mj"] == 123456789, d[0]["energy_mj"]' \
    "$tmp/json" || fail "a fresh process starts from energy_start_mj"

# --- help and bad arguments
"$EERL_BIN" devices --help >"$tmp/out" 2>&1
expect_rc 0 $? "eerl devices --help"
expect_in "$tmp/out" "usage: eerl devices [--json]" "help text"
"$EERL_BIN" devices --bogus >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "eerl devices --bogus"
expect_in "$tmp/err" "unknown option '--bogus'" "bad flag message"
expect_in "$tmp/err" "--json" "bad flag lists the valid options"
[ -s "$tmp/out" ] && fail "bad flag: nothing should go to stdout"
"$EERL_BIN" devices extra >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "eerl devices extra"
expect_in "$tmp/err" "unknown argument 'extra'" "stray argument message"

# --- no driver
EERL_NVML_LIBRARY="$tmp/nowhere/libnvidia-ml.so.1" "$EERL_BIN" devices >"$tmp/out" 2>"$tmp/err"
expect_rc 1 $? "eerl devices without a driver"
expect_in "$tmp/err" "no NVIDIA driver" "no-driver message"
expect_in "$tmp/err" "$tmp/nowhere/libnvidia-ml.so.1" "no-driver message names the library"

# --- malformed state file
printf '{"gpus": [ {"name": "x",, ] }\n' >"$tmp/bad.json"
EERL_FAKE_NVML_STATE="$tmp/bad.json" "$EERL_BIN" devices >"$tmp/out" 2>"$tmp/err"
expect_rc 1 $? "eerl devices with a malformed state file"
expect_in "$tmp/err" "bad state file $tmp/bad.json" "malformed state names the file"
expect_in "$tmp/err" "line 1" "malformed state names the place"

# --- a lost GPU: the others are listed, the lost one is reported, exit 1
python3 - "$state" <<'EOF'
import json, os, sys
p = sys.argv[1]
d = json.load(open(p))
d["gpus"][1]["lost"] = True
open(p + ".w", "w").write(json.dumps(d))
os.rename(p + ".w", p)
EOF
"$EERL_BIN" devices >"$tmp/out" 2>"$tmp/err"
expect_rc 1 $? "eerl devices with a lost GPU"
expect_in "$tmp/out" "GPU-0a0a0a0a-1111-2222-3333-444444444444" "lost GPU: GPU 0 still listed"
expect_in "$tmp/err" "GPU 1" "lost GPU: message names the GPU"
expect_in "$tmp/err" "lost" "lost GPU: message says lost"
[ "$(grep -c "GPU 1" "$tmp/err")" -eq 1 ] || fail "lost GPU: reported more than once: $(cat "$tmp/err")"
"$EERL_BIN" devices --json >"$tmp/json" 2>"$tmp/err"
expect_rc 1 $? "eerl devices --json with a lost GPU"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert [g["lost"] for g in d] == [False, True], d; assert d[1]["uuid"] is None and d[0]["sm_clock_mhz"] == 1755' \
    "$tmp/json" || fail "lost GPU: JSON marks it lost and keeps GPU 0"

if [ "$fails" -ne 0 ]; then
    echo "test_cli_devices: $fails failure(s)" >&2
    exit 1
fi
echo "test_cli_devices: all checks passed"
