#!/usr/bin/env bash
# The stable and experimental parts of the public headers (include/eerl/experimental.h): a
# program built against include/ as a user builds it sees the stable API (no eerl_ctl_describe,
# forward test or option setter of the controller); eerl_ctl_config is the same struct in both
# views, with no research knob in either (they are experimental options of the table, set on a
# controller by name); the experimental view is asked for with eerl/experimental.h, first, and
# its functions are linked from libeerl.a (libeerl.so exports the stable API only).
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
    "eerl_ctl_describe(0, &cfg, 0, 0, 0, 0)" "eerl_ctl_set_option(0, \"warmup_updates\", 0, 0, 0)"; do
    printf '#include "eerl/core.h"\n#include "eerl/options.h"\nint main(void) { eerl_ctl_config cfg; %s; return 0; }\n' \
        "$what" >"$tmp/knob.c"
    if build_c knob; then fail "the stable headers show the experimental '$what'"; fi
done
# Nor does the experimental view hold a research knob in the struct.
for what in "cfg.eerl_revision = 0" "cfg.warmup_updates = 0"; do
    printf '#include "eerl/experimental.h"\nint main(void) { eerl_ctl_config cfg; %s; return 0; }\n' \
        "$what" >"$tmp/xknob.c"
    if build_c xknob static; then fail "eerl_ctl_config holds the research knob '$what'"; fi
done

# The experimental view: the same struct; the knobs are options set on the controller by name.
cat >"$tmp/exp.c" <<C
#include <string.h>
#include "eerl/experimental.h"
#include "eerl/runtime.h"
int main(void)
{
    unsigned clocks[] = {1980, 1800, 1500, 1200, 900};
    eerl_ctl_config c, got;
    eerl_ctl *ctl;
    double w = -1, r = -1;
    if (sizeof(c) != $stable_size)
        return 1;
    if (eerl_ctl_config_default(EERL_MODE_COLOCATED, &c) < 0 || c.size != sizeof(c))
        return 2;
    c.strategy = EERL_STRATEGY_PAPER;
    if (eerl_ctl_new(EERL_MODE_COLOCATED, &c, clocks, 5, 1980, &ctl) < 0)
        return 3;
    if (eerl_ctl_set_option(ctl, "warmup_updates", 0, NULL, 0) < 0 ||
        eerl_ctl_get_option(ctl, "warmup_updates", &w) < 0 ||
        eerl_ctl_get_option(ctl, "paper_revision", &r) < 0)
        return 4;
    if (eerl_ctl_describe(ctl, &got, NULL, 0, NULL, NULL) < 0)
        return 5;
    eerl_ctl_free(ctl);
    return w == 0 && r == 1 && got.size == sizeof(got) ? 0 : 6;
}
C
build_c exp static || fail "an experimental-view program does not build: $(head -n 5 "$tmp/exp.err")"
"$tmp/exp"
expect_rc 0 $? "the experimental view (1: another struct size than the stable view's, 2-5: setup, 6: an option not set or read)"

printf '#include "eerl/core.h"\n#include "eerl/experimental.h"\nint main(void) { return 0; }\n' \
    >"$tmp/order.c"
# The experimental functions are not in the shared library.
build_c exp && fail "an experimental-view program links against libeerl.so; it must need libeerl.a"

if build_c order; then fail "eerl/experimental.h after eerl/core.h builds; it must refuse"; fi
grep -q "include eerl/experimental.h first" "$tmp/order.err" ||
    fail "the refusal does not say what to do: $(head -n 3 "$tmp/order.err")"

[ $fails -eq 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
echo "eerl_ctl_config: $stable_size bytes in both views, no research knobs; experimental view ok"
