#!/usr/bin/env bash
# The eerl command (cli/) and the programs (programs/) are built on the public headers of the
# two libraries (docs/internals/design.md, "Two libraries"): include/eerl/*.h (libeerl) and
# include/eerl/tools/*.h (libeerl_tools), besides their own files. An #include "..." that
# names a header under src/ fails, as one found nowhere does. (Their build sees include/ only,
# so such an include does not compile either; this says which public header to use instead.)
# Fails naming the file and the line.
set -u
src=${EERL_SOURCE_DIR:?EERL_SOURCE_DIR is not set}
cd "$src" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
n=0
while IFS= read -r f; do
    while IFS=: read -r line inc; do
        n=$((n + 1))
        if [ -e "include/$inc" ] || [ -e "$(dirname "$f")/$inc" ]; then
            continue # a public header, or the program's own
        fi
        if [ -e "src/$inc" ]; then
            fail "$f:$line includes src/$inc, a header inside a library: use a public one" \
                "(include/eerl/ or include/eerl/tools/), or add the call to one"
            continue
        fi
        fail "$f:$line includes \"$inc\", found neither under include/ nor beside the file"
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
        sed -E 's/^([0-9]+):.*"([^"]+)".*/\1:\2/')
done < <(find cli programs -name '*.[ch]' | sort)
[ "$n" -gt 0 ] || fail "found no #include in cli/ or programs/: the check is broken"
[ "$fails" -eq 0 ] || exit 1
echo "$n includes in cli/ and programs/: public headers or their own, none under src/"
