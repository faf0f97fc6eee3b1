#!/usr/bin/env bash
# The eerl command (cli/) and the programs (programs/) are built on the public headers of the
# two libraries (docs/internals/design.md, "Two libraries"): include/eerl/*.h (libeerl) and
# include/eerl/tools/*.h (libeerl_tools), besides their own files. An #include "..." that
# names a header under src/ fails, unless it is one of the few still listed below (the CLI's
# trace reading and a few calls that have no public header yet); a listed one that is gone
# fails too, so the list only shrinks. Fails naming the file and the line.
set -u
src=${EERL_SOURCE_DIR:?EERL_SOURCE_DIR is not set}
cd "$src" || exit 1
# file:header pairs not yet moved to a public header (issue 56 item 3: to be emptied).
known="cli/analyze_estimate.c:analysis/estimate.h
cli/analyze_estimate.c:runtime/unexplained.h
cli/analyze_estimate.c:trace/estimate_line.h
cli/cmd_analyze.c:analysis/analysis.h
cli/cmd_analyze.c:runtime/unexplained.h
cli/cmd_replay.c:core/setting.h
cli/cmd_replay.c:trace/trace.h
cli/cmd_sim.c:analysis/analysis.h
cli/cmd_sim.c:sim/schedule.h
cli/cmd_sim.c:sim/sim.h
cli/cmd_sim.c:twin/presets.h
cli/cmd_sim.c:twin/scenario.h
cli/cmd_sweep.c:twin/presets.h
cli/cmd_sweep.c:twin/scenario.h
cli/util.c:analysis/analysis.h
cli/workload_opt.c:twin/scenario.h
cli/workload_opt.h:twin/workload.h
programs/eerld/journal.c:common/safefile.h
programs/eerld/leases.h:agent/protocol.h
programs/eerld/metrics.c:common/safefile.h
programs/eerld/policy.c:common/safefile.h
programs/eerld/reader.h:agent/protocol.h
programs/eerld/startup.c:common/safefile.h
programs/eerld/startup.c:twin/idle_device.h"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
seen=""
n=0
while IFS= read -r f; do
    while IFS=: read -r line inc; do
        n=$((n + 1))
        if [ -e "include/$inc" ] || [ -e "$(dirname "$f")/$inc" ]; then
            continue # a public header, or the program's own
        fi
        if [ -e "src/$inc" ]; then
            if grep -qxF "$f:$inc" <<<"$known"; then
                seen+="$f:$inc"$'\n'
            else
                fail "$f:$line includes src/$inc, a header inside a library: use a public one" \
                    "(include/eerl/ or include/eerl/tools/), or add the call to one"
            fi
            continue
        fi
        fail "$f:$line includes \"$inc\", found neither under include/ nor beside the file"
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
        sed -E 's/^([0-9]+):.*"([^"]+)".*/\1:\2/')
done < <(find cli programs -name '*.[ch]' | sort)
while IFS= read -r k; do
    [ -n "$k" ] || continue
    grep -qxF "$k" <<<"$seen" || fail "$k is listed as a src/ include left, but is gone: remove it from the list"
done <<<"$known"
[ "$n" -gt 0 ] || fail "found no #include in cli/ or programs/: the check is broken"
[ "$fails" -eq 0 ] || exit 1
echo "$n includes in cli/ and programs/: public headers or their own, $(grep -c . <<<"$known") src/ includes left"
