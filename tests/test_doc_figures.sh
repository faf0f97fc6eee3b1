#!/usr/bin/env bash
# tools/doc-figures: the figures the README and docs/quickstart.md quote from `eerl sim` are what
# the command prints now (--check on this checkout); a page whose quoted figure differs fails
# the check, naming the page and the block, and writing puts the command's figures back while
# leaving every other byte of the page as it was; bad input exits 2 naming it.
set -uo pipefail

: "${EERL_BIN:?EERL_BIN must name the eerl binary}"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh" || exit 1

root="$(cd "$(dirname "$0")/.." && pwd)"
tool="$root/tools/doc-figures"

"$tool" --eerl "$EERL_BIN" --check >"$tmp/out" 2>&1
expect_rc 0 $? "doc-figures --check on this checkout (run tools/doc-figures to write the pages)"
[ -s "$tmp/out" ] && { fail "--check on this checkout said:"; cat "$tmp/out" >&2; }

# A copy of the pages with one quoted figure changed: the check names it, writing mends it.
mkdir -p "$tmp/root/docs"
cp "$root/README.md" "$tmp/root/"
cp "$root/docs/quickstart.md" "$root/docs/what-eerl-did.md" "$tmp/root/docs/"
sed -i 's/\(main-headline -->\)[0-9.]*%/\117.52%/' "$tmp/root/README.md"
cmp -s "$root/README.md" "$tmp/root/README.md" && fail "the planted figure did not change the copy"
"$tool" --eerl "$EERL_BIN" --check --root "$tmp/root" >"$tmp/out" 2>&1
expect_rc 1 $? "--check on a page with a stale figure"
expect_in "$tmp/out" "README.md: main-headline quotes figures the command no longer prints" \
    "--check names the stale block"
"$tool" --eerl "$EERL_BIN" --root "$tmp/root" >"$tmp/out" 2>&1
expect_rc 0 $? "writing the copy"
cmp -s "$root/README.md" "$tmp/root/README.md" || fail "writing did not restore README.md"
cmp -s "$root/docs/quickstart.md" "$tmp/root/docs/quickstart.md" ||
    fail "writing changed docs/quickstart.md, whose figures were right"

# Bad input: a missing binary, a folder without the pages, an unknown block.
"$tool" --eerl "$tmp/nope" --check >"$tmp/out" 2>&1
expect_rc 2 $? "--eerl of a missing file"
expect_in "$tmp/out" "--eerl $tmp/nope: not an executable" "names the missing binary"
"$tool" --eerl "$EERL_BIN" --check --root "$tmp/none" >"$tmp/out" 2>&1
expect_rc 2 $? "--root without the pages"
expect_in "$tmp/out" "no README.md there" "names the missing page"
cp "$root/README.md" "$tmp/before"
printf '<!-- tools/doc-figures: no-such -->x<!-- /tools/doc-figures -->\n' >>"$tmp/root/README.md"
cp "$tmp/root/README.md" "$tmp/before"
"$tool" --eerl "$EERL_BIN" --root "$tmp/root" >"$tmp/out" 2>&1
expect_rc 2 $? "an unknown block"
expect_in "$tmp/out" "unknown block 'no-such'" "names the unknown block"
cmp -s "$tmp/before" "$tmp/root/README.md" || fail "a refused run changed the page"

exit $((fails > 0))
