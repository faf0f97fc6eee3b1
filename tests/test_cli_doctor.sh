#!/usr/bin/env bash
# `eerl doctor` (docs/doctor.md): against the stand-in NVML library and an eerld serving simulated
# GPUs, each line says ok, warning or error with the values a user needs (driver, GPU UUIDs,
# clock ranges, current clocks, eerld's version, the GPUs it would lease, permission), --json is
# one object jq reads, and the exit status is 1 exactly when a line is an error: no driver, an
# eerld that does not answer, or (as another user) an eerld whose policy refuses the user and no
# root or CAP_SYS_ADMIN. The other-user checks run as uid 65534 through setpriv and need root;
# they are skipped, saying so, otherwise. Needs EERL_BIN and EERL_NVML_LIBRARY (ctest sets them).
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"
: "${EERL_NVML_LIBRARY:?EERL_NVML_LIBRARY must name the stand-in libnvidia-ml.so.1}"
EERLD=$(dirname "$EERL_BIN")/eerld
[ -x "$EERLD" ] || { echo "FAIL: $EERLD not built" >&2; exit 1; }
command -v jq >/dev/null || { echo "FAIL: jq is needed (apt-get install jq)" >&2; exit 1; }
unset EERL_SOCKET

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1
dpid=
cleanup_hook() {
    [ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
}

# Everything a user other than root runs must be readable by it: the directory, the binary, the
# stand-in library and its state file.
chmod 0755 "$tmp"
cp "$EERL_BIN" "$tmp/eerl" && cp "$EERL_NVML_LIBRARY" "$tmp/libnvidia-ml.so.1" || exit 1
chmod 0755 "$tmp/eerl" "$tmp/libnvidia-ml.so.1"
export EERL_NVML_LIBRARY=$tmp/libnvidia-ml.so.1
cat >"$tmp/state.json" <<'EOF'
{
  "driver_version": "580.159.04",
  "gpus": [
    {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0a0a0a0a-1111-2222-3333-444444444444",
     "memory_clocks_mhz": [2619, 1593], "sm_clocks_mhz": {"max": 1980, "min": 345, "step": 15},
     "sm_clock_mhz": 1755, "power_mw": 312500},
    {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0b0b0b0b-1111-2222-3333-444444444444",
     "memory_clocks_mhz": [2619], "sm_clocks_mhz": {"max": 1980, "min": 345, "step": 15},
     "sm_clock_mhz": 1410, "power_mw": 90000}
  ]
}
EOF
chmod 0644 "$tmp/state.json"
export EERL_FAKE_NVML_STATE=$tmp/state.json
version=$("$EERL_BIN" --version | cut -d' ' -f2)

# start_eerld NAME ARGS...: a daemon on $tmp/NAME.sock serving two simulated H100s, its socket
# open to uid 65534's group; waits (up to 2 minutes) until it serves.
start_eerld() {
    local name=$1
    shift
    sock=$tmp/$name.sock
    "$EERLD" --foreground --socket "$sock" --state-dir "$tmp/state-$name" --devices twin:h100x2 \
        --socket-group "$(id -gn 65534 2>/dev/null || echo root)" "$@" 2>"$tmp/eerld-$name.log" &
    dpid=$!
    wait_until 120 test -S "$sock" ||
        { fail "eerld did not start: $(cat "$tmp/eerld-$name.log")"; return 1; }
}
stop_eerld() {
    kill -TERM "$dpid"
    wait "$dpid"
    dpid=
}

# line FILE CHECK: the line of that check ("ok       gpu 0  ...").
line() { grep -E "^(ok|warning|error) +$2  " "$1"; }
# expect_line FILE CHECK STATUS TEXT: that check's line has that status and holds TEXT.
expect_line() {
    local l
    l=$(line "$1" "$2")
    [ -n "$l" ] || { fail "no '$2' line in:"; sed 's/^/    /' "$1" >&2; return; }
    [[ "$l" == "$3 "* ]] || fail "'$2' is not $3: $l"
    [[ "$l" == *"$4"* ]] || fail "'$2' line lacks '$4': $l"
}

# --- the stand-in NVML and a twin eerld: every line ok, with the values
start_eerld twin || exit 1
EERL_SOCKET=$sock "$EERL_BIN" doctor >"$tmp/out" 2>"$tmp/err"
expect_rc 0 $? "eerl doctor with a driver and an answering eerld"
expect_line "$tmp/out" library ok "libeerl $version"
expect_line "$tmp/out" nvml ok "EERL_NVML_LIBRARY=$tmp/libnvidia-ml.so.1"
expect_line "$tmp/out" driver ok "NVIDIA driver 580.159.04"
expect_line "$tmp/out" gpus ok "2 GPUs"
expect_line "$tmp/out" "gpu 0" ok "GPU-0a0a0a0a-1111-2222-3333-444444444444 NVIDIA H100 80GB HBM3"
expect_line "$tmp/out" "gpu 0" ok "SM clocks 345-1980 MHz (110 values), now 1755 MHz"
expect_line "$tmp/out" "gpu 1" ok "now 1410 MHz"
expect_line "$tmp/out" eerld ok "eerld $version answers at $sock"
expect_line "$tmp/out" "eerld lease" ok "lets uid 0 lease GPUs 0-1"
expect_line "$tmp/out" permission ok "root"
expect_in "$tmp/out" "all checks ok" "summary"
[ -s "$tmp/err" ] && fail "unexpected stderr: $(cat "$tmp/err")"

# --- while another client holds GPU 0, the lease line names the free GPUs and the holder
"$EERL_BIN" lock --gpu 0 --mhz 1200 --socket "$sock" -- \
    env EERL_SOCKET="$sock" "$EERL_BIN" doctor >"$tmp/out" 2>/dev/null
expect_rc 0 $? "eerl doctor inside eerl lock"
expect_line "$tmp/out" "eerld lease" ok "lease GPUs 1 "
expect_line "$tmp/out" "eerld lease" ok "leased now: GPU 0 (uid 0 pid "

# --- --json: one object jq reads, a status per check
"$EERL_BIN" doctor --json --socket "$sock" >"$tmp/json" 2>"$tmp/err"
expect_rc 0 $? "eerl doctor --json"
jq -e '.ok == true and .errors == 0 and .warnings == 0' "$tmp/json" >/dev/null ||
    fail "--json summary: $(cat "$tmp/json")"
[ "$(jq -r '[.checks[].check] | join(",")' "$tmp/json")" = \
    "library,nvml,driver,gpus,gpu 0,gpu 1,eerld,eerld lease,permission" ] ||
    fail "--json checks: $(jq -c '[.checks[].check]' "$tmp/json")"
jq -e 'all(.checks[]; .status == "ok" and .fix == "")' "$tmp/json" >/dev/null ||
    fail "--json: a check is not ok: $(cat "$tmp/json")"
jq -e '.checks[] | select(.check == "driver") | .message | contains("580.159.04")' \
    "$tmp/json" >/dev/null || fail "--json: driver version missing"

# --- no NVML in this process, but eerld answers: a warning, GPUs read through eerld, exit 0
EERL_NVML_LIBRARY=$tmp/nowhere/libnvidia-ml.so.1 EERL_SOCKET=$sock "$EERL_BIN" doctor \
    >"$tmp/out" 2>&1
expect_rc 0 $? "eerl doctor without NVML, with eerld"
expect_line "$tmp/out" nvml warning "$tmp/nowhere/libnvidia-ml.so.1"
expect_line "$tmp/out" gpus ok "2 GPUs (read through eerld)"
expect_line "$tmp/out" "gpu 1" ok "TWIN-h100-idle-0001"
stop_eerld

# --- eerld named but not answering: error with what to do, exit 1
EERL_SOCKET=$tmp/none.sock "$EERL_BIN" doctor >"$tmp/out" 2>&1
expect_rc 1 $? "eerl doctor with EERL_SOCKET naming no socket"
expect_line "$tmp/out" eerld error "cannot connect to eerld at $tmp/none.sock"
expect_in "$tmp/out" "unset EERL_SOCKET" "eerld error: what to do"
expect_in "$tmp/out" "would fail" "summary says a run would fail"

# --- no driver (and no eerld): error naming the library, exit 1
if [ -S /run/eerl/eerld.sock ]; then
    echo "SKIP: no-driver check: this machine runs eerld at its default socket"
else
    EERL_NVML_LIBRARY=$tmp/nowhere/libnvidia-ml.so.1 "$EERL_BIN" doctor >"$tmp/out" 2>&1
    expect_rc 1 $? "eerl doctor without a driver"
    expect_line "$tmp/out" nvml error \
        "no NVIDIA driver: EERL_NVML_LIBRARY=$tmp/nowhere/libnvidia-ml.so.1"
    expect_in "$tmp/out" "install the NVIDIA driver" "no driver: what to do"
    expect_line "$tmp/out" eerld ok "no eerld"
    line "$tmp/out" "gpu 0" && fail "no driver: a GPU line was printed"
    EERL_NVML_LIBRARY=$tmp/nowhere/libnvidia-ml.so.1 "$EERL_BIN" doctor --json >"$tmp/json" 2>&1
    expect_rc 1 $? "eerl doctor --json without a driver"
    jq -e '.ok == false and .errors == 1 and
           (.checks[] | select(.check == "nvml") | .status == "error")' "$tmp/json" >/dev/null ||
        fail "--json without a driver: $(cat "$tmp/json")"
fi

# --- bad arguments
"$EERL_BIN" doctor --bogus >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "eerl doctor --bogus"
expect_in "$tmp/err" "unknown option '--bogus'; valid options: --json, --socket PATH" "bad flag"
"$EERL_BIN" doctor --socket >"$tmp/out" 2>"$tmp/err"
expect_rc 2 $? "eerl doctor --socket without a path"
expect_in "$tmp/err" "--socket needs the path" "--socket without a path"

# --- as another user (uid 65534): eerld's policy decides
if [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null || ! id 65534 >/dev/null 2>&1; then
    echo "SKIP: the other-user checks need root, setpriv and a user 65534 (nobody)"
else
    as_nobody() { setpriv --reuid=65534 --regid="$(id -g 65534)" --clear-groups "$@"; }
    # The default policy: only root leases. No root, no CAP_SYS_ADMIN: a controlling run fails.
    start_eerld refuse || exit 1
    EERL_SOCKET=$sock as_nobody "$tmp/eerl" doctor >"$tmp/out" 2>&1
    expect_rc 1 $? "eerl doctor as a user eerld refuses"
    expect_line "$tmp/out" eerld ok "sees uid 65534"
    expect_line "$tmp/out" "eerld lease" error "does not let uid 65534 lease"
    expect_line "$tmp/out" permission error "uid 65534 is not root, lacks CAP_SYS_ADMIN"
    expect_in "$tmp/out" "observe_only=True" "the refusal says observe-only still works"
    EERL_SOCKET=$sock as_nobody "$tmp/eerl" doctor --json >"$tmp/json" 2>&1
    jq -e '.ok == false and .errors == 2 and
           ([.checks[] | select(.status == "error") | .check] == ["eerld lease", "permission"])' \
        "$tmp/json" >/dev/null || fail "--json of a refused user: $(cat "$tmp/json")"
    stop_eerld
    # A policy that lists the user: neither root nor CAP_SYS_ADMIN is needed.
    printf '[access]\nusers = 65534\n' >"$tmp/policy.conf"
    chmod 0644 "$tmp/policy.conf"
    start_eerld allow --policy "$tmp/policy.conf" || exit 1
    EERL_SOCKET=$sock as_nobody "$tmp/eerl" doctor >"$tmp/out" 2>&1
    expect_rc 0 $? "eerl doctor as a user eerld leases to"
    expect_line "$tmp/out" "eerld lease" ok "lets uid 65534 lease GPUs 0-1"
    expect_line "$tmp/out" permission ok "needs neither: eerld locks the clocks"
    stop_eerld
    # A socket in a directory only its owner (root) may pass: the directory is named, with its
    # mode, and the fix is its mode (joining a group cannot help); a socket whose group the user
    # is not in: the fix is that group.
    mkdir -m 0700 "$tmp/private" || exit 1
    sock_dir=$tmp/private
    "$EERLD" --foreground --socket "$sock_dir/e.sock" --state-dir "$tmp/state-private" \
        --devices twin:h100x2 2>"$tmp/eerld-private.log" &
    dpid=$!
    wait_until 120 test -S "$sock_dir/e.sock" || fail "eerld in $sock_dir did not start"
    EERL_SOCKET=$sock_dir/e.sock as_nobody "$tmp/eerl" doctor >"$tmp/out" 2>&1
    expect_rc 1 $? "eerl doctor as a user a root-only directory refuses"
    expect_line "$tmp/out" eerld error \
        "the directory $sock_dir (mode 0700, owner root, group root) does not let uid 65534"
    expect_in "$tmp/out" "joining a group does not help while $sock_dir has mode 0700" \
        "root-only directory: the directory is the obstacle"
    expect_in "$tmp/out" "mode 0755, or 0750 with group eerl" "root-only directory: the fix"
    grep -q "add uid 65534 to the group\|socket's group" "$tmp/out" &&
        fail "root-only directory: doctor advises joining a group: $(cat "$tmp/out")"
    stop_eerld
    start_eerld rootgroup --socket-group root || exit 1
    EERL_SOCKET=$sock as_nobody "$tmp/eerl" doctor >"$tmp/out" 2>&1
    expect_rc 1 $? "eerl doctor as a user outside the socket's group"
    expect_line "$tmp/out" eerld error "the socket $sock (mode 0660, owner root, group root)"
    expect_in "$tmp/out" "add uid 65534 to the group 'root', which $sock lets through" \
        "socket's group: joining it is the fix"
    stop_eerld
    # No eerld, but CAP_SYS_ADMIN: may lock in-process.
    if [ -S /run/eerl/eerld.sock ]; then
        echo "SKIP: CAP_SYS_ADMIN check: this machine runs eerld at its default socket"
    elif ! as_nobody --inh-caps=+sys_admin --ambient-caps=+sys_admin true 2>/dev/null; then
        echo "SKIP: CAP_SYS_ADMIN check: setpriv cannot raise ambient capabilities here"
    else
        as_nobody --inh-caps=+sys_admin --ambient-caps=+sys_admin "$tmp/eerl" doctor \
            >"$tmp/out" 2>&1
        expect_rc 0 $? "eerl doctor with CAP_SYS_ADMIN"
        expect_line "$tmp/out" permission ok "uid 65534 has CAP_SYS_ADMIN"
        as_nobody "$tmp/eerl" doctor >"$tmp/out" 2>&1
        expect_rc 1 $? "eerl doctor without root, CAP_SYS_ADMIN or eerld"
        expect_line "$tmp/out" permission error "and no eerld runs here"
    fi
fi

[ "$fails" -eq 0 ] && echo "test_cli_doctor: all checks passed"
exit $((fails > 0))
