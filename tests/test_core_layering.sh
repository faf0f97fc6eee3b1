#!/usr/bin/env bash
# The core's layers (docs/internals/design.md, "The core's layout"), lowest first:
#   0 base:        config, options, names, setting, observation, lsq, predictor, grid, refs, events, estimate
#   1 record:      record (the only writer of the lock, counters, references, events)
#   2 context:     context.h (what a judge, a proposer or the life cycle sees)
#   3 toolkit:     ratios, monitor, phase_model, propose (the proposer interface), judge.h
#   4 strategies:  judge/*, propose/*
#   5 life cycle:  lifecycle, save
#   6 controller:  controller
# A file includes core headers of its own layer or below only, the include graph has no cycle,
# and nothing calls up: the controller's calls (eerl_ctl_*, eerl__ctl_*) are made from
# controller.c only (and from outside the core), the life cycle's and save's from controller.c,
# the record's controller-only calls from controller.c, and no proposer includes a judge's header.
# Fails naming the file and the line.
set -u
src=${EERL_SOURCE_DIR:?EERL_SOURCE_DIR is not set}
cd "$src/src" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

layer() { # layer PATH-under-src: the layer of a core file, or nothing
    case $1 in
    core/judge/* | core/propose/*) echo 4 ;;
    core/config.* | core/options.* | core/names.* | core/setting.* | core/observation.* | core/lsq.* | core/predictor.* | \
        core/grid.* | core/refs.* | core/events.* | core/estimate.*) echo 0 ;;
    core/record.*) echo 1 ;;
    core/context.h) echo 2 ;;
    core/ratios.* | core/monitor.* | core/phase_model.* | core/propose.* | core/judge.h) echo 3 ;;
    core/lifecycle.* | core/save.*) echo 5 ;;
    core/controller.*) echo 6 ;;
    esac
}

files=$(find core -name '*.c' -o -name '*.h' | sort)
edges=""
n=0
for f in $files; do
    n=$((n + 1))
    lf=$(layer "$f")
    [ -n "$lf" ] || { fail "$f is in no layer: add it to the table (and docs/internals/design.md)"; continue; }
    while IFS=: read -r line inc; do
        [ -n "$inc" ] || continue
        li=$(layer "$inc")
        [ -n "$li" ] || { fail "$f:$line includes $inc, which is in no layer"; continue; }
        [ "$li" -le "$lf" ] || fail "$f:$line (layer $lf) includes $inc (layer $li)"
        edges+="$f $inc"$'\n'
    done < <(grep -n '^#include "core/' "$f" | sed -E 's/^([0-9]+):#include "([^"]+)".*/\1:\2/')
done
# Each .c and its header are one module: an edge from the module that includes to the one
# included, for tsort's cycle check.
if ! printf '%s' "$edges" | sed -E 's/\.[ch]( |$)/\1/g' | awk '$1 != $2' |
    tsort >/dev/null 2>&1; then
    fail "the core's include graph has a cycle"
fi

calls_outside() { # calls_outside REGEX ALLOWED-FILE-REGEX WHAT
    local hits
    hits=$(grep -rnE "$1" core | grep -vE "^($2):" | grep -vE '^[^:]+:[0-9]+:\s*(/\*|\*)')
    [ -z "$hits" ] || fail "$3:"$'\n'"$hits"
}
# The functions controller.c defines (the public controller calls and its accessor).
ctl_fns=$(grep -oE '^[a-z][a-z_ *]* \**(eerl_[a-z_]+|eerl__[a-z_]+)\(' core/controller.c |
    sed -E 's/.*[^a-z_](eerl_[a-z_]+)\($/\1/' | sort -u | paste -sd'|')
[ -n "$ctl_fns" ] || fail "found no function defined in core/controller.c: the check is broken"
calls_outside "\\b($ctl_fns)\\(" 'core/controller\.[ch]' \
    "the controller's calls made from inside the core (a call back up)"
calls_outside '\beerl__life_[a-z_]+\(|\beerl__(save|restore)\(' \
    'core/controller\.c|core/lifecycle\.[ch]|core/save\.[ch]' "the life cycle or save called from below"
calls_outside '\beerl__rec_(new|free|intake|finish|take|status|set_fit)\(' \
    'core/controller\.c|core/record\.[ch]' "the record's controller-only calls made by a strategy"
# Within the strategies' layer a proposer decides from what the context gives it, never from a
# judge's own parts: a proposer that reads a judge's header is an arrow back up.
hits=$(grep -n '^#include "core/judge/' core/propose/*.c 2>/dev/null)
[ -z "$hits" ] || fail "a proposer includes a judge's header (take the setting from the context):"$'\n'"$hits"
[ "$fails" -eq 0 ] || exit 1
echo "$n core files in 7 layers: no upward include, no include cycle, no call back up"
