#!/usr/bin/env bash
# No function a reader must scroll (docs/internals/design.md, house style): no C function in
# src/, cli/ or programs/ and no Python function in python/eerl is over 100 lines. A C function
# is counted from its opening brace, a line that is exactly "{" (the repository's clang-format
# style, BreakBeforeBraces: Linux, puts a function's braces so and no other brace at column 0),
# to the next line that starts with "}", both included. A Python function is counted from its
# def to its last line (ast end_lineno - lineno + 1), nested functions counted on their own
# too. Fails naming file:line, the function and its length.
# Usage: test_function_length.sh [PATH...] (default: the folders above, relative to the source
# tree; a PATH may be a folder or a file). EERL_FUNCTION_LINES_MAX changes the limit (100).
set -u
src=${EERL_SOURCE_DIR:?EERL_SOURCE_DIR is not set}
cd "$src" || exit 1
[ $# -gt 0 ] || set -- src cli programs python/eerl
exec /usr/bin/python3 - "${EERL_FUNCTION_LINES_MAX:-100}" "$@" <<'PY'
import ast, os, re, sys

limit = int(sys.argv[1])
paths = sys.argv[2:]


def files(ext):
    for p in paths:
        if os.path.isfile(p):
            if p.endswith(ext):
                yield p
            continue
        for root, dirs, names in os.walk(p):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for n in sorted(names):
                if n.endswith(ext):
                    yield os.path.join(root, n)


def c_name(lines, brace):
    """The name of the function whose body opens at lines[brace]: the first identifier followed
    by "(" in the signature lines above it (back to a blank line, a comment's end, a
    preprocessor line or the previous declaration's end)."""
    i = brace
    while i > 0:
        prev = lines[i - 1].rstrip()
        if not prev or prev.startswith(("#", "}")) or prev.endswith((";", "*/", "{", "}")):
            break
        i -= 1
    m = re.search(r"(\w+)\s*\(", " ".join(lines[i:brace]))
    return (m.group(1) if m else "?"), i + 1


def c_functions(path):
    """(line, name, length) of every function in the C file path"""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i] == "{":
            j = i + 1
            while j < len(lines) and not lines[j].startswith("}"):
                j += 1
            if j == len(lines):
                print("FAIL: %s:%d: a function opens here and never closes (no line starting "
                      "with '}')" % (path, i + 1))
                sys.exit(1)
            name, line = c_name(lines, i)
            out.append((line, name, j - i + 1))
            i = j
        i += 1
    return out


def py_functions(path):
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    return [(n.lineno, n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


found, too_long, longest = {"C": 0, "Python": 0}, [], (0, "", "")
for lang, ext, scan in (("C", ".c", c_functions), ("C", ".h", c_functions),
                        ("Python", ".py", py_functions)):
    for path in files(ext):
        for line, name, length in scan(path):
            found[lang] += 1
            where = "%s:%d" % (path, line)
            if length > longest[0]:
                longest = (length, name, where)
            if length > limit:
                too_long.append((where, name, length, lang))
for where, name, length, lang in sorted(too_long):
    print("FAIL: %s: %s function %s() is %d lines, more than %d: split it into named steps"
          % (where, lang, name, length, limit))
if found["C"] == 0 and found["Python"] == 0:
    print("FAIL: no functions found in %s: the check is broken" % " ".join(paths))
    sys.exit(1)
print("%d C and %d Python functions in %s: %s; the longest is %s() at %s, %d lines"
      % (found["C"], found["Python"], " ".join(paths),
         "%d over %d lines" % (len(too_long), limit) if too_long else "none over %d lines" % limit,
         longest[1], longest[2], longest[0]))
sys.exit(1 if too_long else 0)
PY
