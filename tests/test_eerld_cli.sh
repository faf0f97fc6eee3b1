#!/usr/bin/env bash
# The eerl commands that talk to eerld (status, lock, reset, devices --socket) against a daemon
# serving simulated GPUs: what they print, that `eerl lock` releases when its command ends or
# when it is interrupted, and that bad input gives a clear message and the documented status.
# Needs EERL_BIN (ctest sets it); eerld sits beside it.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"
EERLD=$(dirname "$EERL_BIN")/eerld
[ -x "$EERLD" ] || { echo "FAIL: $EERLD not built" >&2; exit 1; }

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1
dpid=
cleanup_hook() {
    [ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
}

sock=$tmp/eerld.sock
"$EERLD" --foreground --socket "$sock" --state-dir "$tmp/state" --devices twin:h100x4 \
    --metrics-textfile "$tmp/eerl.prom" --metrics-interval 1 2>"$tmp/eerld.log" &
dpid=$!
wait_until 120 test -S "$sock"
[ -S "$sock" ] || { fail "eerld did not start"; cat "$tmp/eerld.log" >&2; exit 1; }

# --- status: table and JSON
"$EERL_BIN" status --socket "$sock" >"$tmp/out" 2>&1
expect_rc 0 $? "eerl status"
expect_in "$tmp/out" "4 GPUs" "status: count"
expect_in "$tmp/out" "TWIN-h100-idle-0003" "status: UUID"
EERL_SOCKET=$sock "$EERL_BIN" status --json >"$tmp/out" 2>&1
expect_rc 0 $? "eerl status --json via EERL_SOCKET"
expect_in "$tmp/out" '"holder": null' "status --json: no holder"

# --- lock with a command: the command sees the lock, its status comes back, then release
"$EERL_BIN" lock --gpus 1,2 --clock 1400 --socket "$sock" -- \
    "$EERL_BIN" status --json --socket "$sock" >"$tmp/out" 2>"$tmp/err"
expect_rc 0 $? "eerl lock -- eerl status"
expect_in "$tmp/err" "GPU 1 locked at 1395 MHz" "lock: snapped clock reported"
expect_in "$tmp/out" '"locked_mhz": [' "lock: the command saw the lock"
expect_in "$tmp/out" "\"pid\": " "lock: holder pid shown"
"$EERL_BIN" lock --gpu 0 --mhz 1200 --socket "$sock" -- sh -c 'exit 7' 2>/dev/null
expect_rc 7 $? "eerl lock passes the command's exit status"
"$EERL_BIN" status --json --socket "$sock" >"$tmp/out"
grep -q '"locked_mhz": \[' "$tmp/out" && fail "a GPU is still locked after eerl lock ended"

# --- lock with a command: a signal sent to eerl lock (a supervisor's SIGTERM or SIGHUP) reaches
# the command; eerl lock waits for it, releases, and exits with the command's status. (SIGINT is
# forwarded the same way, but a background job of a script starts with SIGINT ignored.)
gone() { [ ! -e "/proc/$1" ] || grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat"; }
for sig in TERM HUP; do
    rm -f "$tmp/cmd"
    "$EERL_BIN" lock --gpus 1 --clock 1200 --socket "$sock" -- sh -c \
        'trap "echo got >>\"$0\"; exit 3" '$sig'; echo $$ >"$0"; while :; do sleep 0.05; done' \
        "$tmp/cmd" 2>"$tmp/err" &
    lpid=$!
    wait_until 120 test -s "$tmp/cmd" || fail "eerl lock -- CMD never started CMD"
    cpid=$(head -n1 "$tmp/cmd")
    kill -$sig "$lpid"
    if wait_until 120 grep -q got "$tmp/cmd"; then
        wait "$lpid"
        expect_rc 3 $? "eerl lock -- CMD after SIG$sig: CMD's status"
        expect_in "$tmp/err" "released" "lock: released after SIG$sig reached CMD"
    else
        fail "SIG$sig sent to eerl lock never reached its command"
        kill -KILL "$cpid" "$lpid" 2>/dev/null
        wait "$lpid" 2>/dev/null
    fi
    "$EERL_BIN" status --json --socket "$sock" >"$tmp/out"
    grep -q '"locked_mhz": \[' "$tmp/out" && fail "a GPU is still locked after SIG$sig"
done
# A supervisor's SIGKILL: the command dies with eerl lock, never running on unlocked.
rm -f "$tmp/cmd"
"$EERL_BIN" lock --gpus 1 --clock 1200 --socket "$sock" -- sh -c \
    'echo $$ >"$0"; while :; do sleep 0.05; done' "$tmp/cmd" 2>/dev/null &
lpid=$!
wait_until 120 test -s "$tmp/cmd" || fail "eerl lock -- CMD never started CMD"
cpid=$(head -n1 "$tmp/cmd")
kill -KILL "$lpid"
wait "$lpid" 2>/dev/null
wait_until 120 gone "$cpid" || { fail "the command ran on after eerl lock was SIGKILLed"; kill -KILL "$cpid"; }

# --- lock without a command holds until SIGTERM, then releases
"$EERL_BIN" lock --gpus 3 --clock 1005 --socket "$sock" 2>"$tmp/err" &
lpid=$!
wait_until 120 grep -q holding "$tmp/err" || fail "eerl lock never said it was holding"
"$EERL_BIN" status --socket "$sock" >"$tmp/out"
expect_in "$tmp/out" "1005" "lock (hold): GPU 3 locked"
expect_in "$tmp/eerld.log" "uid $(id -u) pid $lpid: leased GPU 3" "eerld logs the lease grant"
# A second writer is refused, naming the holder.
"$EERL_BIN" lock --gpus 3 --clock 1200 --socket "$sock" -- true >"$tmp/out2" 2>&1
expect_rc 1 $? "second lock on a held GPU"
expect_in "$tmp/out2" "GPU 3 is leased by uid $(id -u) pid $lpid" "busy names the holder"
# The metrics file shows the lease and the lock.
# (written every second: wait for the one after the lease)
wait_until 120 grep -qF "pid=\"$lpid\"} 1" "$tmp/eerl.prom"
wait_until 120 grep -qF 'eerl_gpu_sm_clock_mhz{gpu="3",UUID="TWIN-h100-idle-0003"} 1005' "$tmp/eerl.prom"
expect_in "$tmp/eerl.prom" "eerl_gpu_lease_info{gpu=\"3\",UUID=\"TWIN-h100-idle-0003\",uid=\"$(id -u)\",pid=\"$lpid\"} 1" "metrics: lease"
expect_in "$tmp/eerl.prom" 'eerl_gpu_locked_clock_mhz{gpu="3",UUID="TWIN-h100-idle-0003"} 1005' "metrics: locked clock"
expect_in "$tmp/eerl.prom" 'eerl_gpu_energy_joules_total{gpu="0",UUID="TWIN-h100-idle-0000"}' "metrics: energy"
expect_in "$tmp/eerl.prom" 'eerl_gpu_power_watts{gpu="0"' "metrics: power"
expect_in "$tmp/eerl.prom" 'eerl_gpu_sm_clock_mhz{gpu="3",UUID="TWIN-h100-idle-0003"} 1005' "metrics: clock"
kill -TERM "$lpid"
wait "$lpid"
expect_rc 0 $? "eerl lock (hold) after SIGTERM"
expect_in "$tmp/err" "released" "lock (hold): released"
"$EERL_BIN" status --json --socket "$sock" >"$tmp/out"
grep -q '"locked_mhz": \[' "$tmp/out" && fail "GPU 3 still locked after the holder was stopped"

# --- reset: root resets a GPU another client holds
"$EERL_BIN" lock --gpus 2 --clock 1100 --socket "$sock" 2>"$tmp/err" &
lpid=$!
wait_until 120 grep -q holding "$tmp/err" || fail "eerl lock never said it was holding"
"$EERL_BIN" reset --gpus 2 --socket "$sock" >"$tmp/out" 2>&1
expect_rc 0 $? "eerl reset --gpus 2"
expect_in "$tmp/out" "reset GPU 2 to the default governor" "reset: message"
"$EERL_BIN" status --json --socket "$sock" >"$tmp/out"
grep -q '"locked_mhz": \[' "$tmp/out" && fail "GPU 2 still locked after eerl reset"
kill -TERM "$lpid"
wait "$lpid" 2>/dev/null

# --- devices through the daemon
"$EERL_BIN" devices --socket "$sock" >"$tmp/out" 2>&1
expect_rc 0 $? "eerl devices --socket"
expect_in "$tmp/out" "210-1980/15" "devices: clock range through eerld"
expect_in "$tmp/out" "twin h100 (idle)" "devices: name through eerld"

# --- bad input
"$EERL_BIN" reset --gpu 9 --socket "$sock" >"$tmp/out" 2>&1
expect_rc 1 $? "reset of a GPU that does not exist"
expect_in "$tmp/out" "GPU 9 does not exist (4 GPUs: 0-3)" "reset: bad GPU named"
"$EERL_BIN" lock --gpu 0 --mhz 99999 --socket "$sock" -- true >"$tmp/out" 2>&1
expect_rc 1 $? "lock at an unsupported clock"
expect_in "$tmp/out" "99999" "lock: bad clock named"
"$EERL_BIN" lock --gpus 0 --socket "$sock" >"$tmp/out" 2>&1
expect_rc 2 $? "lock without --clock"
expect_in "$tmp/out" "--clock is required" "lock: missing --clock"
# one name per concept across commands (eerl meter's), the earlier ones kept as deprecated aliases
for c in lock reset; do
    "$EERL_BIN" $c --help >"$tmp/out"
    expect_in "$tmp/out" "--gpus LIST" "$c --help names --gpus"
    expect_in "$tmp/out" "deprecated" "$c --help says the old spelling is deprecated"
done
expect_in "$tmp/out" "--gpu, the earlier name" "reset --help: --gpu alias"
"$EERL_BIN" lock --help >"$tmp/lock-help" 2>&1 # whole, not piped to grep -q (SIGPIPE)
expect_in "$tmp/lock-help" "--clock MHZ" "lock --help (names --clock)"
"$EERL_BIN" lock --gpu 0 --mhz 1200 --socket "$sock" -- >"$tmp/out" 2>&1
expect_rc 2 $? "lock with nothing after --"
"$EERL_BIN" status --socket "$tmp/nope.sock" >"$tmp/out" 2>&1
expect_rc 1 $? "status without a daemon"
expect_in "$tmp/out" "cannot connect to eerld at $tmp/nope.sock" "status: missing socket named"
"$EERL_BIN" status --bogus >"$tmp/out" 2>&1
expect_rc 2 $? "status --bogus"
expect_in "$tmp/out" "unknown option '--bogus'" "status: bad option named"
"$EERL_BIN" devices --socket "$tmp/nope.sock" >"$tmp/out" 2>&1
expect_rc 1 $? "devices --socket without a daemon"

# --- eerld's own bad input
"$EERLD" --devices twin:h999x2 --foreground --socket "$tmp/x.sock" --state-dir "$tmp/st2" >"$tmp/out" 2>&1
expect_rc 1 $? "eerld with an unknown twin GPU"
expect_in "$tmp/out" "unknown twin GPU 'h999'" "eerld: bad twin GPU named"
"$EERLD" --devices twin:h100 --foreground >"$tmp/out" 2>&1
expect_rc 1 $? "eerld with a malformed --devices"
expect_in "$tmp/out" "give nvml or twin:GPUxN" "eerld: --devices format explained"
"$EERLD" --socket-mode 0666 >"$tmp/out" 2>&1
expect_rc 2 $? "eerld --socket-mode 0666"
expect_in "$tmp/out" "every user" "eerld: world-accessible socket refused"
"$EERLD" --foreground --socket "$sock" --state-dir "$tmp/st3" --devices twin:h100x1 >"$tmp/out" 2>&1
expect_rc 1 $? "a second eerld on the same socket"
expect_in "$tmp/out" "another eerld is serving" "eerld: second instance refused"
mode=$(stat -c %a "$sock")
[ "$mode" = 660 ] || fail "socket mode is $mode, expected 660"

kill -TERM "$dpid"
wait "$dpid"
expect_rc 0 $? "eerld exit after SIGTERM"
dpid=
[ -e "$sock" ] && fail "socket left behind after SIGTERM"
[ "$fails" -eq 0 ] && echo "all eerld CLI checks passed"
exit $((fails > 0))
