#!/usr/bin/env bash
# The stable and experimental parts of the public headers (include/eerl/experimental.h): a
# program built against include/ as a user builds it sees the stable API (no research knobs in
# eerl_ctl_config, no eerl_ctl_describe or forward test), and its shorter struct gets the
# newest revisions from the library, whatever lies past its end; the experimental view is asked
# for with eerl/experimental.h, first, and its functions are linked from libeerl.a (libeerl.so
# exports the stable API only).
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"
: "${EERL_SOURCE_DIR:?EERL_SOURCE_DIR must name the source tree}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1
build=$(dirname "$EERL_BIN")
cc=${CC:-cc}
[ -e "$build/libeerl.so" ] || { echo "skipped: no libeerl.so in $build"; exit 0; }
inc="$EERL_SOURCE_DIR/include"
build_c() { # build_c NAME [static]: compiles $tmp/NAME.c as a user would (0 when it compiles
    # and links), against libeerl.so, or libeerl.a with "static"; a sanitizer build's libeerl
    # needs its runtime in the program too
    local lib=(-L "$build" -leerl -Wl,-rpath,"$build")
    # shellcheck disable=SC2207 # pkg-config's words are separate arguments
    [ "${2:-}" != static ] ||
        lib=("$build/libeerl.a" $(pkg-config --libs jansson 2>/dev/null || echo -ljansson)
            -lpthread -ldl -lm)
    "$cc" -std=c11 -Wall -Werror ${EERL_SANITIZE:+-fsanitize=$EERL_SANITIZE} -I "$inc" \
        -o "$tmp/$1" "$tmp/$1.c" "${lib[@]}" 2>"$tmp/$1.err"
}

# A user's program: the stable struct, a controller from it, and its size for the next part.
cat >"$tmp/stable.c" <<'C'
#include <stdio.h>
#include "eerl/core.h"
#include "eerl/runtime.h"
int main(void)
{
    unsigned clocks[] = {1980, 1800, 1500, 1200, 900};
    eerl_ctl_config c;
    eerl_ctl *ctl;
    if (eerl_ctl_config_default(EERL_MODE_COLOCATED, &c) < 0 || c.size != sizeof(c))
        return 1;
    if (eerl_ctl_new(EERL_MODE_COLOCATED, &c, clocks, 5, 1980, &ctl) < 0)
        return 2;
    eerl_ctl_free(ctl);
    printf("%zu\n", sizeof(c));
    return 0;
}
C
build_c stable || fail "a stable-API program does not build: $(head -n 5 "$tmp/stable.err")"
stable_size=$("$tmp/stable")
expect_rc 0 $? "the stable-API program"

for what in "cfg.eerl_revision = 0" "cfg.warmup_updates = 0" \
    "eerl_ctl_describe(0, &cfg, 0, 0, 0, 0)"; do
    printf '#include "eerl/core.h"\nint main(void) { eerl_ctl_config cfg; %s; return 0; }\n' \
        "$what" >"$tmp/knob.c"
    if build_c knob; then fail "the stable headers show the experimental '$what'"; fi
done

# The experimental view: a struct of the stable size, garbage past its end, gets the defaults.
cat >"$tmp/exp.c" <<C
#include <stddef.h>
#include <string.h>
#include "eerl/experimental.h"
#include "eerl/runtime.h"
int main(void)
{
    unsigned clocks[] = {1980, 1800, 1500, 1200, 900};
    size_t stable = $stable_size, end = offsetof(eerl_ctl_config, group_names) + 64;
    eerl_ctl_config c, got;
    eerl_ctl *ctl;
    if (stable >= sizeof(c))
        return 1;
    memset(&c, 0xab, sizeof(c));
    if (eerl_ctl_config_init(EERL_MODE_COLOCATED, &c, stable) < 0 || c.size != stable)
        return 2;
    memset((char *)&c + end, 0xab, sizeof(c) - end); /* the caller's padding and beyond */
    if (eerl_ctl_new(EERL_MODE_COLOCATED, &c, clocks, 5, 1980, &ctl) < 0)
        return 3;
    if (eerl_ctl_describe(ctl, &got, NULL, 0, NULL, NULL) < 0)
        return 4;
    eerl_ctl_free(ctl);
    eerl_ctl_config_default(EERL_MODE_COLOCATED, &c);
    return got.warmup_updates == c.warmup_updates && got.eerl_revision == c.eerl_revision &&
                   got.inflight_revision == c.inflight_revision &&
                   got.paper_revision == c.paper_revision && got.size == sizeof(got)
               ? 0
               : 5;
}
C
build_c exp static || fail "an experimental-view program does not build: $(head -n 5 "$tmp/exp.err")"
"$tmp/exp"
expect_rc 0 $? "a stable-size config in the experimental view (1-3: setup, 5: a research knob read past the struct's end)"

printf '#include "eerl/core.h"\n#include "eerl/experimental.h"\nint main(void) { return 0; }\n' \
    >"$tmp/order.c"
# The experimental functions are not in the shared library.
build_c exp && fail "an experimental-view program links against libeerl.so; it must need libeerl.a"

if build_c order; then fail "eerl/experimental.h after eerl/core.h builds; it must refuse"; fi
grep -q "include eerl/experimental.h first" "$tmp/order.err" ||
    fail "the refusal does not say what to do: $(head -n 3 "$tmp/order.err")"

[ $fails -eq 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
echo "stable view: $stable_size bytes of eerl_ctl_config, no research knobs; experimental view ok"
