#!/usr/bin/env bash
# eerld's access boundary from the outside, with the eerl commands (issue 19): a socket dir
# others may write is refused; the socket is 0660 and in --socket-group; lease rights follow the
# groups the peer process really has (not the ones /etc/group lists for its user); `eerl devices
# --socket` and `eerl status` over 64 GPUs; `eerl lock` ends with an error when eerld dies.
# The group checks create a throwaway user and two groups (removed on exit) and need root; they
# are skipped, saying so, otherwise. Needs EERL_BIN (ctest sets it); eerld sits beside it.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"
EERLD=$(dirname "$EERL_BIN")/eerld
[ -x "$EERLD" ] || { echo "FAIL: $EERLD not built" >&2; exit 1; }

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1
dpid=
user= groups_made=()
cleanup_hook() {
    [ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
    [ -n "$user" ] && userdel "$user" 2>/dev/null
    for g in "${groups_made[@]}"; do groupdel "$g" 2>/dev/null; done
}

# start_eerld LOG ARGS...: eerld in the foreground; waits (up to 20 s) until it serves $sock.
start_eerld() {
    local log=$1
    shift
    "$EERLD" --foreground --socket "$sock" --state-dir "$tmp/state" "$@" 2>"$log" &
    dpid=$!
    for _ in $(seq 1000); do [ -S "$sock" ] && return 0; sleep 0.02; done
    fail "eerld did not start: $(cat "$log")"
    return 1
}
stop_eerld() {
    kill -TERM "$dpid"
    wait "$dpid"
    dpid=
}

# --- 10: a socket dir others may write (not sticky) is refused; a sticky one (like /tmp) is not
mkdir -m 0777 "$tmp/open" && chmod 0777 "$tmp/open"
timeout 20 "$EERLD" --foreground --socket "$tmp/open/s.sock" --state-dir "$tmp/st-open" \
    --devices twin:h100x1 >"$tmp/out" 2>&1
expect_rc 1 $? "eerld with a world-writable socket dir"
expect_in "$tmp/out" "socket dir $tmp/open is writable by every user (mode 0777)" "socket dir refused"
[ -e "$tmp/open/s.sock" ] && fail "a socket was created in the refused dir"
[ -e "$tmp/st-open/journal.json" ] && fail "the refused start wrote a journal"
chmod 1777 "$tmp/open"
sock=$tmp/open/s.sock
start_eerld "$tmp/eerld-sticky.log" --devices twin:h100x1 && stop_eerld

# --- 9: over 64 GPUs, through the daemon
sock=$tmp/many.sock
if start_eerld "$tmp/eerld-many.log" --devices twin:h100x1024; then
    "$EERL_BIN" devices --socket "$sock" >"$tmp/out" 2>&1
    expect_rc 0 $? "eerl devices --socket with 1024 GPUs"
    expect_in "$tmp/out" "TWIN-h100-idle-1023" "devices: the 1024th GPU"
    "$EERL_BIN" status --json --socket "$sock" >"$tmp/out" 2>&1
    expect_rc 0 $? "eerl status with 1024 GPUs"
    n=$(grep -c '"uuid": "TWIN-h100-idle-' "$tmp/out")
    [ "$n" -eq 1024 ] || fail "eerl status --json lists $n GPUs, expected 1024"
    stop_eerld
fi

# --- 15: eerl lock holding when eerld dies ends with an error
sock=$tmp/lock.sock
rm -rf "$tmp/state"
if start_eerld "$tmp/eerld-lock.log" --devices twin:h100x2 --heartbeat-timeout 600; then
    "$EERL_BIN" lock --gpu 0 --mhz 1200 --socket "$sock" 2>"$tmp/lock.err" &
    lpid=$!
    for _ in $(seq 500); do grep -q holding "$tmp/lock.err" && break; sleep 0.02; done
    kill -KILL "$dpid"
    wait "$dpid" 2>/dev/null
    dpid=
    for _ in $(seq 200); do kill -0 "$lpid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$lpid" 2>/dev/null; then
        fail "eerl lock still runs 20 s after eerld died"
        kill -TERM "$lpid"
    fi
    wait "$lpid"
    expect_rc 1 $? "eerl lock after eerld died"
    expect_in "$tmp/lock.err" "lost eerld" "eerl lock names the lost daemon"
    expect_in "$tmp/lock.err" "no longer held at 1200 MHz" "eerl lock says the lock is gone"
fi

# --- as root: the socket's group, and groups from the peer process, not from /etc/group
if [ "$(id -u)" -ne 0 ]; then
    echo "SKIP: the socket-group and peer-group checks need root (they add a user and groups)"
elif ! command -v useradd >/dev/null || ! command -v setpriv >/dev/null; then
    echo "SKIP: useradd or setpriv missing: the peer-group checks need them"
else
    ga=eerlt$$a gb=eerlt$$b user=eerlt$$u
    groupadd "$ga" && groups_made+=("$ga")
    groupadd "$gb" && groups_made+=("$gb")
    useradd -M -N -g "$ga" -G "$ga,$gb" -s /usr/sbin/nologin "$user" ||
        { fail "useradd $user failed"; user=; }
    if [ -n "$user" ]; then
        chmod 0755 "$tmp"
        cp "$EERL_BIN" "$tmp/eerl" && chmod 0755 "$tmp/eerl"
        printf '[access]\ngroups = %s\n' "$gb" >"$tmp/policy.conf"
        chmod 0644 "$tmp/policy.conf"
        sock=$tmp/groups.sock
        rm -rf "$tmp/state"
        if start_eerld "$tmp/eerld-groups.log" --devices twin:h100x2 --policy "$tmp/policy.conf" \
            --socket-group "$ga"; then
            [ "$(stat -c %a "$sock")" = 660 ] || fail "socket mode $(stat -c %a "$sock"), expected 660"
            [ "$(stat -c %G "$sock")" = "$ga" ] || fail "socket group $(stat -c %G "$sock"), expected $ga"
            as_user() { # as_user GROUPS CMD...: runs CMD as $user with exactly those groups
                local gs=$1
                shift
                setpriv --reuid="$user" --regid="$ga" --groups="$gs" "$@"
            }
            # /etc/group lists the user in $gb, but this process does not have it.
            as_user "$ga" "$tmp/eerl" lock --gpu 0 --mhz 1200 --socket "$sock" -- true >"$tmp/out" 2>&1
            expect_rc 1 $? "lock by a process without the policy's group"
            expect_in "$tmp/out" "may not lease GPUs" "lease refused without the group"
            as_user "$ga,$gb" "$tmp/eerl" lock --gpu 0 --mhz 1200 --socket "$sock" -- true >"$tmp/out" 2>&1
            expect_rc 0 $? "lock by a process with the policy's group"
            # Not in the socket's group: the socket itself stays closed to it.
            setpriv --reuid="$user" --regid="$gb" --groups="$gb" "$tmp/eerl" status --socket "$sock" \
                >"$tmp/out" 2>&1
            expect_rc 1 $? "status from outside the socket's group"
            expect_in "$tmp/out" "cannot connect to eerld" "socket closed to other groups"
            stop_eerld
        fi
    fi
fi

[ "$fails" -eq 0 ] && echo "all eerld access checks passed"
exit $((fails > 0))
