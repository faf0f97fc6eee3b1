#!/usr/bin/env bash
# `eerl report` hands its arguments to the Python package's eerl.report, the one implementation
# of the pictures (python/tests/test_report.py draws them through this command). Here: the
# Python it picks ($EERL_PYTHON first) gets every argument unchanged, and where no Python has
# eerl.report and matplotlib the command exits 1 naming what it tried and what to install,
# writing nothing.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"

. "$(dirname "$0")/testlib.sh" || exit 1

# A stand-in Python: the probe (-c "import eerl.report, matplotlib") answers as $1 says; a run
# records its arguments, one a line.
fake_python() { # fake_python PATH PROBE_EXIT
    cat >"$1" <<FAKE
#!/usr/bin/env bash
if [ "\$2" = "import eerl.report, matplotlib" ]; then exit $2; fi
printf '%s\n' "\$@" >"$tmp/args"
exit 0
FAKE
    chmod +x "$1"
}

fake_python "$tmp/py-ok" 0
EERL_PYTHON="$tmp/py-ok" "$EERL_BIN" report "a b.jsonl" -o "$tmp/x.svg" 2>"$tmp/err"
expect_rc 0 $? "report through a Python that has eerl.report"
[ "$(sed -n 1p "$tmp/args")" = "-c" ] || fail "the Python was not run with -c: $(cat "$tmp/args")"
expect_in "$tmp/args" "from eerl.report import main" "runs the package's main"
expect_in "$tmp/args" "prog='eerl report'" "names itself eerl report"
[ "$(tail -n 3 "$tmp/args" | paste -sd'|')" = "a b.jsonl|-o|$tmp/x.svg" ] ||
    fail "the arguments did not pass unchanged: $(cat "$tmp/args")"

fake_python "$tmp/py-bare" 1
EERL_PYTHON="$tmp/py-bare" "$EERL_BIN" report t.jsonl -o "$tmp/y.png" 2>"$tmp/err"
expect_rc 1 $? "report without a Python that has eerl.report"
expect_in "$tmp/err" "no Python here has the eerl package with matplotlib (tried $tmp/py-bare)" \
    "names the Python it tried"
expect_in "$tmp/err" "pip install 'eerl[report]'" "says what to install"
EERL_PYTHON="$tmp/none/python3" "$EERL_BIN" report t.jsonl -o "$tmp/y.png" 2>"$tmp/err"
expect_rc 1 $? "report with EERL_PYTHON naming no program"
expect_in "$tmp/err" "(tried $tmp/none/python3)" "names the missing Python"
[ ! -e "$tmp/y.png" ] || fail "a refused report wrote y.png"

[ $fails -eq 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
echo "ok"
