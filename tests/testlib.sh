# Shared by the shell tests (sourced, not run): a scratch directory removed on exit, a failure
# counter and the checks the tests use. A test ends with `exit $((fails > 0))`. A test that
# starts something it must stop on exit (a daemon, a user) defines `cleanup_hook`; it runs on
# exit before the scratch directory goes.
# shellcheck shell=bash

tmp=$(mktemp -d "${TMPDIR:-/tmp}/eerl-test-XXXXXX")
testlib_exit() {
    if declare -F cleanup_hook >/dev/null; then cleanup_hook; fi
    rm -rf "$tmp"
}
trap testlib_exit EXIT
fails=0

fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}

# expect_rc WANT GOT WHAT: the exit status GOT of WHAT was WANT.
expect_rc() {
    [ "$1" -eq "$2" ] || fail "$3: exit status $2, expected $1"
}

# expect_in FILE TEXT WHAT: FILE holds TEXT (fixed string).
expect_in() {
    grep -qF -- "$2" "$1" || { fail "$3: '$2' not in output:"; sed 's/^/    /' "$1" >&2; }
}

# wait_until SECONDS CMD...: runs CMD every 20 ms until it succeeds; fails (status 1) after
# SECONDS. A hang guard for something that must happen, never a speed check: give it minutes.
wait_until() {
    local limit=$1 start
    shift
    start=$(date +%s)
    until "$@"; do
        [ $(($(date +%s) - start)) -ge "$limit" ] && return 1
        sleep 0.02
    done
}
