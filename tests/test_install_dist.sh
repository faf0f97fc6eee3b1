#!/usr/bin/env bash
# `cmake --install` of this build into a scratch root, at two prefixes: eerld and eerl where the
# prefix says, the systemd unit installed with its ExecStart at that prefix's eerld (and its
# documentation page beside it), the group's sysusers file, the policy example (never over
# /etc/eerl/eerld.conf) and the Slurm epilog calling that prefix's eerl.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"
: "${EERL_SOURCE_DIR:?EERL_SOURCE_DIR must name the source tree}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1
build=$(dirname "$EERL_BIN")
cmake=$(command -v cmake) || { echo "cmake not found"; exit 1; }
[ -x "$build/eerld" ] || { echo "skipped: eerld not built (EERL_BUILD_PROGRAMS=OFF)"; exit 0; }

for prefix in /usr/local /usr; do
    root="$tmp/root${prefix//\//_}"
    DESTDIR="$root" "$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.out" 2>&1
    expect_rc 0 $? "cmake --install --prefix $prefix"
    unit="$root$prefix/lib/systemd/system/eerld.service"
    [ -f "$unit" ] || { fail "$prefix: no unit at ${unit#"$root"}"; continue; }
    exe=$(sed -n 's/^ExecStart=\([^ ]*\) .*/\1/p' "$unit")
    [ "$exe" = "$prefix/sbin/eerld" ] || fail "$prefix: the unit runs '$exe', not $prefix/sbin/eerld"
    [ -x "$root$exe" ] || fail "$prefix: the unit's $exe is not installed"
    expect_in "$unit" "Documentation=file://$prefix/share/doc/eerl/eerld.md" "$prefix: unit docs"
    [ -f "$root$prefix/share/doc/eerl/eerld.md" ] || fail "$prefix: eerld.md not installed"
    # the rest of the unit is dist/'s, line for line
    diff <(grep -v '^ExecStart=\|^Documentation=\|^#' "$EERL_SOURCE_DIR/dist/eerld.service") \
        <(grep -v '^ExecStart=\|^Documentation=\|^#' "$unit") >/dev/null ||
        fail "$prefix: the installed unit differs from dist/eerld.service beyond its paths"
    cmp -s "$EERL_SOURCE_DIR/dist/eerl.sysusers.conf" "$root$prefix/lib/sysusers.d/eerl.conf" ||
        fail "$prefix: sysusers file not installed as lib/sysusers.d/eerl.conf"
    cmp -s "$EERL_SOURCE_DIR/dist/eerld.conf" "$root$prefix/share/eerl/eerld.conf.example" ||
        fail "$prefix: policy example not installed as share/eerl/eerld.conf.example"
    [ ! -e "$root/etc/eerl/eerld.conf" ] || fail "$prefix: installed over /etc/eerl/eerld.conf"
    epi="$root$prefix/share/eerl/slurm-epilog-eerl.sh"
    [ -x "$epi" ] || { fail "$prefix: Slurm epilog not installed executable"; continue; }
    expect_in "$epi" "EERL=\${EERL:-$prefix/bin/eerl}" "$prefix: the epilog's eerl"
    [ -x "$root$prefix/bin/eerl" ] || fail "$prefix: eerl not installed"
    sh -n "$epi" || fail "$prefix: the installed epilog does not parse"
done

[ $fails -eq 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
echo "ok"
