#!/usr/bin/env bash
# What libeerl.so exports (docs/internals/design.md, "Two libraries"): the stable API only, the
# functions that the installed headers (include/eerl/*.h, not include/eerl/tools/) mark
# EERL_EXPORT, and no more than EERL_EXPORTS_MAX of them. No twin, simulator, analysis or
# actuator name, no internal eerl__ name and nothing that is not eerl's. Every libeerl function
# the Python package calls through ctypes must be among them. Fails naming each symbol.
# Usage: test_exports.sh [BUILD-DIR] (default: the directory of $EERL_BIN).
set -u
build=${1:-$(dirname "${EERL_BIN:?EERL_BIN must name the eerl binary of the build to check}")}
src=${EERL_SOURCE_DIR:?EERL_SOURCE_DIR is not set}
command -v nm >/dev/null || { echo "FAIL: nm not found: apt-get install binutils"; exit 1; }
[ -e "$build/libeerl.so" ] || { echo "FAIL: no libeerl.so in $build"; exit 1; }
# The stable API counted in docs/internals/design.md; raising it needs a reason written there.
max=${EERL_EXPORTS_MAX:-90}
exec /usr/bin/python3 - "$build/libeerl.so" "$src" "$max" <<'PY'
import glob, os, re, subprocess, sys

lib, src, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True,
                     check=True).stdout
exported = set()
for line in out.splitlines():
    parts = line.split()
    if len(parts) == 3 and parts[1] not in "wWvV":  # the C runtime's weak hooks are not eerl's
        exported.add(parts[2].split("@")[0])


def strip_comments(text):
    """the text without comments and preprocessor lines"""
    text = re.sub(r"//[^\n]*", " ", re.sub(r"/\*.*?\*/", " ", text, flags=re.S))
    return re.sub(r"^\s*#.*$", " ", text, flags=re.M)


def declared(paths, marked):
    """function names declared in the headers; with marked, only those carrying EERL_EXPORT"""
    names = set()
    for p in paths:
        text = strip_comments(open(p).read())
        for decl in re.split(r"[;{}]", text):
            if marked and "EERL_EXPORT" not in decl:
                continue
            m = re.search(r"\b(eerl_[a-z0-9_]+)\s*\([^()]*(\([^()]*\)[^()]*)*\)\s*$", decl.strip())
            if m and not decl.lstrip().startswith("typedef"):
                names.add(m.group(1))
    return names


public = sorted(glob.glob(os.path.join(src, "include/eerl/*.h")))
tools = sorted(glob.glob(os.path.join(src, "include/eerl/tools/*.h")))
stable = declared(public, True)
tool_fns = declared(tools, False)
fails = []
if not stable or not tool_fns:
    fails.append("found no EERL_EXPORT function in include/eerl/*.h or none in include/eerl/"
                 "tools/: the check is broken")
forbidden = re.compile(r"^eerl_(twin|sim|an|analysis|actuator|wl|preset)_")
for name in sorted(exported):
    if name.startswith("eerl__"):
        fails.append("%s: an internal name is exported" % name)
    elif forbidden.match(name) or name in tool_fns:
        fails.append("%s: a tools-library name (twin, simulator, analysis, actuator) is exported"
                     % name)
    elif name not in stable:
        fails.append("%s: exported, but no installed header marks it EERL_EXPORT" % name)
for name in sorted(stable - exported):
    fails.append("%s: marked EERL_EXPORT in include/eerl/ but not exported" % name)
if len(exported) > limit:
    fails.append("libeerl.so exports %d symbols, more than %d (the stable API): %s"
                 % (len(exported), limit, " ".join(sorted(exported))))
called = set()
for root, _, files in os.walk(os.path.join(src, "python/eerl")):
    for f in files:
        if f.endswith(".py"):
            called |= set(re.findall(r"\beerl_[a-z0-9_]+\b", open(os.path.join(root, f)).read()))
for name in sorted(called & (stable | tool_fns | declared(public, False))):
    if name not in exported:
        fails.append("%s: the Python package calls it, but libeerl.so does not export it" % name)
for f in fails:
    print("FAIL: " + f)
print("libeerl.so exports %d functions (at most %d), all of the installed headers' stable API; "
      "%d tools-library functions kept out; %d called from Python"
      % (len(exported), limit, len(tool_fns), len(called & exported)))
sys.exit(1 if fails else 0)
PY
