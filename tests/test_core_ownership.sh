#!/usr/bin/env bash
# The controller owns the search's record (docs/controller.md): the lock, the locked setting, the
# request, the counters of trials and refreshes, the block length and the reference fit's floor
# are written in src/core/controller.c and lifecycle.c only; a strategy reports what happened through
# controller.h's life-cycle calls. Fails naming every other file and line that assigns one of
# them (also through ++ or +=).
set -u
src=${EERL_SOURCE_DIR:?EERL_SOURCE_DIR is not set}
cd "$src" || exit 1
fields='locked|locked_setting|next|trials|refreshes|block_updates|pred_min_t|ref_n|ref_head|observed|rejected|after|after_count'
pattern="ctl->($fields)(\.[a-z_]+(\[[^]]*\])?)?[[:space:]]*([-+*/|&]?=[^=]|\+\+|--)|(\+\+|--)ctl->($fields)\b"
hits=$(grep -nE "$pattern" src/*/*.c src/*/*.h src/core/*/*.c src/core/*/*.h | grep -vE '^src/core/(controller|lifecycle)\.c:')
n=$(ls src/*/*.c src/*/*.h src/core/*/*.c src/core/*/*.h | wc -l)
if [ -n "$hits" ]; then
    echo "the controller's life-cycle fields are written outside src/core/controller.c and lifecycle.c:"
    echo "$hits"
    exit 1
fi
grep -qE "$pattern" src/core/controller.c || { echo "the check matched nothing in controller.c: the pattern is broken"; exit 1; }
echo "$n files checked: the life-cycle fields are written in src/core/controller.c and lifecycle.c only"
