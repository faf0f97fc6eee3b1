#!/usr/bin/env bash
# The docs' paths resolve (docs/README.md lays the docs out; docs/internals/design.md says why):
# every relative Markdown link in a tracked .md file points at an existing file (relative to the
# page), and every path under docs/ or notes/ named anywhere in the tree (C comments, Python,
# tools, tests, data READMEs, the docs themselves) exists. A page that moves without its
# references being updated fails here, naming the file, the line and the path.
set -u
src=${EERL_SOURCE_DIR:?EERL_SOURCE_DIR is not set}
cd "$src" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Paths that name no file on purpose: a made-up framework's page in a test of the integration
# helpers.
exempt=" docs/integrations/acme.md "

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    list() { git ls-files -- "$@"; }
else # a source tree without git: the same files, less the build outputs
    list() { find . -path ./.git -prune -o -path './build*' -prune -o -type f -print | sed 's#^\./##'; }
fi

checked=0
# 1. Relative Markdown links: [text](target) and ![alt](target), anchors stripped.
while IFS= read -r md; do
    [ -f "$md" ] || continue
    dir=$(dirname "$md")
    while IFS=: read -r line target; do
        target=${target#*](}
        target=${target%)}
        target=${target%%#*}
        case $target in "" | http://* | https://* | mailto:*) continue ;; esac
        checked=$((checked + 1))
        [ -e "$dir/$target" ] || fail "$md:$line: link '$target' resolves to no file ($dir/$target)"
    done < <(grep -noE '\]\([^) ]+\)' "$md")
done < <(list '*.md' | grep -E '\.md$')

# 2. Paths under docs/ or notes/ named anywhere (as from the repository's root).
while IFS= read -r f; do
    [ -f "$f" ] || continue
    case $f in *.png | *.svg | *.csv | *.jsonl | *.json | *.gz | *.pdf) continue ;; esac
    grep -Iq . "$f" 2>/dev/null || continue # binary or empty
    while IFS=: read -r line path; do
        path=$(printf '%s' "$path" | grep -oE '(docs|notes)/[A-Za-z0-9_./-]*[A-Za-z0-9_]')
        case $exempt in *" $path "*) continue ;; esac
        checked=$((checked + 1))
        [ -e "$path" ] || fail "$f:$line: '$path' names no file or folder"
    done < <(grep -noE '(^|[^A-Za-z0-9_./-])(docs|notes)/[A-Za-z0-9_./-]*[A-Za-z0-9_]' "$f")
done < <(list)

[ "$checked" -gt 50 ] || fail "only $checked paths checked: the scan found too few to trust"
if [ "$fails" -gt 0 ]; then
    echo "$fails broken doc path(s) of $checked"
    exit 1
fi
echo "ok: $checked doc paths and links resolve"
