#!/usr/bin/env bash
# The controller owns its state, and the compiler says so (docs/internals/design.md, "The core's layout"):
# struct eerl_ctl is defined and named in src/core/controller.c only, the record's struct in
# record.c only; a judge, a proposer or the life cycle sees a const context (context.h) and acts
# through the record's calls. Checked by compiling what a strategy must not be able to write:
# each snippet below has to be refused by the C compiler, and a snippet that uses the context as
# intended has to compile (so a refusal is not a broken include path).
set -u
src=${EERL_SOURCE_DIR:?EERL_SOURCE_DIR is not set}
cd "$src" || exit 1
cc=${CC:-cc}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

hits=$(grep -rn 'struct eerl_ctl\b' src | grep -v '^src/core/controller\.c:')
[ -z "$hits" ] || fail "struct eerl_ctl named outside src/core/controller.c:"$'\n'"$hits"
grep -q '^struct eerl_ctl {' src/core/controller.c || fail "struct eerl_ctl is not defined in src/core/controller.c"
hits=$(grep -rn '^struct eerl__rec {' src | grep -v '^src/core/record\.c:')
[ -z "$hits" ] || fail "the record's struct defined outside src/core/record.c: $hits"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
compiles() { # compiles NAME BODY: 0 when a file of the core's includes and BODY compiles
    printf '#include "core/judge.h"\n#include "core/propose.h"\n%s\n' "$2" >"$tmp/$1.c"
    "$cc" -std=c11 -Wall -Werror -fsyntax-only -I include -I src "$tmp/$1.c" 2>"$tmp/$1.err"
}
compiles ok 'int f(const struct eerl__ctx *cx, const eerl_obs *o, eerl_setting *next);
int f(const struct eerl__ctx *cx, const eerl_obs *o, eerl_setting *next)
{ eerl__rec_ref_add(cx->rec, o); eerl__rec_lock(cx->rec, next, next, "why");
  return (int)cx->refs->n + (int)cx->cfg->n_groups + cx->refs->pred.ready; }' ||
    fail "the context's intended use does not compile: $(cat "$tmp/ok.err")"
refused() { # refused NAME WHAT BODY
    if compiles "$1" "$3"; then fail "the compiler lets a strategy $2"; fi
    [ -z "${VERBOSE:-}" ] || head -n 3 "$tmp/$1.err"
}
refused lock 'write the lock through the record' \
    'int f(const struct eerl__ctx *cx); int f(const struct eerl__ctx *cx) { return cx->rec->locked; }'
refused cfg 'change the configuration' \
    'void f(const struct eerl__ctx *cx); void f(const struct eerl__ctx *cx) { cx->cfg->allowed_loss = 1; }'
refused refs 'add a reference around the record' \
    'void f(const struct eerl__ctx *cx, const eerl_obs *o); void f(const struct eerl__ctx *cx, const eerl_obs *o) { eerl__refs_add(cx->refs, o); }'
refused grid 'move the grid' \
    'void f(const struct eerl__ctx *cx); void f(const struct eerl__ctx *cx) { eerl__grid_top_below_peak(cx->grid); }'
refused ctl 'read the controller struct' \
    'unsigned f(eerl_ctl *c); unsigned f(eerl_ctl *c) { return c->cx.update; }'
refused ctx 'rewrite its own context' \
    'void f(const struct eerl__ctx *cx); void f(const struct eerl__ctx *cx) { cx->update = 0; }'
[ "$fails" -eq 0 ] || exit 1
echo "struct eerl_ctl in controller.c only; the compiler refuses 6 writes and reads a strategy must not make"
