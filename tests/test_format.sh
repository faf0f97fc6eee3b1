#!/usr/bin/env bash
# The tree is formatted with the repository's .clang-format: every C file under version control
# (or, outside a git checkout, every C file of the source tree) must come out of clang-format
# unchanged. Names the files that would change.
set -u
src=${EERL_SOURCE_DIR:?EERL_SOURCE_DIR is not set}
cd "$src" || exit 1
if ! command -v clang-format >/dev/null; then
    echo "clang-format not found: apt-get install clang-format" >&2
    exit 1
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    files=$(git ls-files '*.c' '*.h')
else
    files=$(find . -name '*.c' -o -name '*.h' | grep -v '^./build')
fi
bad=0
n=0
for f in $files; do
    [ -f "$f" ] || continue
    n=$((n + 1))
    if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
        echo "not formatted: $f (run clang-format -i $f)"
        bad=$((bad + 1))
    fi
done
echo "$n files checked, $bad not formatted"
[ "$bad" -eq 0 ]
