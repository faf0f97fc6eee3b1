#!/usr/bin/env bash
# test_call_cycles.sh fails on a cycle planted where none was, naming it, and passes the same
# tree without it. Python: the package python/eerl copied to a scratch tree, each time with one
# circle planted through another form of import (inside a function, relative, `from . import x`
# of a module, absolute `import eerl.x`, `from eerl.x import name` in a method,
# importlib.import_module("eerl.x")). C: two object files that call each other, compiled into
# a scratch build directory laid out as CMake lays out the CLI's.
set -u
# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1
here=$(cd "$(dirname "$0")" && pwd)
src=${EERL_SOURCE_DIR:-$(cd "$here/.." && pwd)}
check=$here/test_call_cycles.sh

# checked TREE WANT-RC WHAT ARGS...: runs the check on source tree TREE; its output in $tmp/out.
checked() {
    local tree=$1 want=$2 what=$3 rc
    shift 3
    EERL_SOURCE_DIR=$tree bash "$check" "$@" >"$tmp/out" 2>&1
    rc=$?
    expect_rc "$want" "$rc" "$what"
    [ "$rc" -eq "$want" ] || sed 's/^/    /' "$tmp/out" >&2
}

# ---- Python ---------------------------------------------------------------------------------
e=python/eerl
i=$e/integrations
pristine=$tmp/pristine
mkdir -p "$pristine"
(cd "$src" && find $e -name '*.py' -print0 | tar --null -cf - -T -) | tar -xf - -C "$pristine"
py=$tmp/py
fresh() { rm -rf "$py" && cp -r "$pristine" "$py"; }

fresh
checked "$py" 0 "the package as it is" --only $e
expect_in "$tmp/out" "no cycle" "the package as it is"

# plant FILE: appends its standard input to FILE (under python/eerl) of a fresh copy.
plant() {
    fresh
    cat >>"$py/$e/$1"
}

# Inside a function, relative: options.py reaches the TRL integration, which imports options.
plant options.py <<'PLANT'


def _planted():
    from .integrations import trl
    return trl
PLANT
checked "$py" 1 "a circle through an import inside a function" --only $e
what="import inside a function"
expect_in "$tmp/out" "FAIL: import cycle in $e:" "$what"
expect_in "$tmp/out" "$e/options.py imports $i/trl.py (line" "$what"
expect_in "$tmp/out" ": from .integrations import trl)" "$what"

# `from . import x` of a module and an absolute import, at the top of two new modules.
fresh
printf 'from . import _planted_b\n' >"$py/$e/_planted_a.py"
printf '"""b"""\nimport eerl._planted_a\n' >"$py/$e/_planted_b.py"
checked "$py" 1 "a circle of two modules" --only $e
a=$e/_planted_a.py b=$e/_planted_b.py
expect_in "$tmp/out" "$a imports $b (line 1: from . import _planted_b)" "from . import x"
expect_in "$tmp/out" "$b imports $a (line 2: import eerl._planted_a)" "absolute import"

# `from eerl import name` in a method: the package's __init__ imports session.py.
plant session.py <<'PLANT'


class _Planted:
    def f(self):
        from eerl import Session
        return Session
PLANT
checked "$py" 1 "a circle through the package's __init__" --only $e
expect_in "$tmp/out" "$e/session.py imports $e/__init__.py (line" "from eerl import"

# importlib.import_module("eerl.x"): _placement.py reaches _trl_callback.py, which imports it.
plant integrations/_placement.py <<'PLANT'


def _planted():
    import importlib
    return importlib.import_module("eerl.integrations._trl_callback")
PLANT
checked "$py" 1 "a circle through importlib" --only $e
expect_in "$tmp/out" "$i/_placement.py imports $i/_trl_callback.py (line" "importlib.import_module"

# ---- C ----------------------------------------------------------------------------------------
cc=${CC:-cc}
command -v "$cc" >/dev/null || { fail "no C compiler ($cc) to build the planted objects"; exit 1; }
c=$tmp/c
objs=$c/build/CMakeFiles/eerl_cli.dir/cli
mkdir -p "$c/src/cli" "$objs"
# compile NAME TEXT: cli/NAME.c of the scratch tree and its object where CMake would put it.
compile() {
    printf '%s\n' "$2" >"$c/src/cli/$1.c"
    "$cc" -c -o "$objs/$1.c.o" "$c/src/cli/$1.c" || fail "cannot compile the planted $1.c"
}
compile main $'int ping(int n);\nint main(void) { return ping(3); }'
compile ping $'int pong(int n);\nint ping(int n) { return n ? pong(n - 1) : 0; }'
compile pong $'int pong(int n) { return n; }'
checked "$c/src" 0 "C files that call one way" "$c/build" --only cli
expect_in "$tmp/out" "cli: 3 files, 2 uses between them; no cycle" "C files that call one way"

compile pong $'int ping(int n);\nint pong(int n) { return n ? ping(n - 1) : 1; }'
checked "$c/src" 1 "C files that call each other" "$c/build" --only cli
expect_in "$tmp/out" "FAIL: call cycle in cli:" "C files that call each other"
expect_in "$tmp/out" "cli/ping.c uses cli/pong.c (pong)" "C files that call each other"
expect_in "$tmp/out" "cli/pong.c uses cli/ping.c (ping)" "C files that call each other"

exit $((fails > 0))
