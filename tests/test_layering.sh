#!/usr/bin/env bash
# One module per .c/.h pair, and modules that call each other one way only: within each folder
# checked, the modules (a name.c and its name.h) must form no include cycle, and a header must
# declare only functions its own .c defines (a header shared by several .c files would hide a
# cycle of calls behind one include). Fails naming the cycle, or the header and the function.
# Usage: test_layering.sh [FOLDER...] (default: the folders below, relative to the source tree).
set -u
src=${EERL_SOURCE_DIR:?EERL_SOURCE_DIR is not set}
cd "$src" || exit 1
[ $# -gt 0 ] || set -- programs/eerld src/meter src/runtime src/analysis src/trace src/agent \
    src/sim
exec /usr/bin/python3 - "$@" <<'PY'
import graphlib
import os, re, sys

def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)

def module_graph(folder):
    """module -> set of modules of the same folder it includes"""
    files = [f for f in os.listdir(folder) if f.endswith((".c", ".h"))]
    names = {os.path.splitext(f)[0] for f in files}
    base = os.path.basename(folder.rstrip("/"))
    graph = {n: set() for n in names}
    for f in files:
        me = os.path.splitext(f)[0]
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', open(os.path.join(folder, f)).read(), re.M):
            d, h = os.path.split(inc)
            if d not in ("", base):
                continue  # another folder's header
            other = os.path.splitext(h)[0]
            if other in names and other != me:
                graph[me].add(other)
    return graph

def find_cycle(graph):
    """A cycle [a, b, ..., a], each node using the next, or None (the standard graphlib)."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        return e.args[1][::-1]  # graphlib lists each node before the one that uses it
    return None

DEF = re.compile(r"^(?!static\b|typedef\b|struct\b[^(]*\{|extern\b)[A-Za-z_][\w \t\*]*?\b(\w+)\s*\(", re.M)

def misplaced_declarations(folder):
    files = [f for f in os.listdir(folder) if f.endswith((".c", ".h"))]
    defined = {}  # function name -> module whose .c defines it
    for f in files:
        if f.endswith(".c"):
            text = strip_comments(open(os.path.join(folder, f)).read())
            for m in DEF.finditer(text):
                rest = text[m.end():]
                depth, i = 1, 0
                while depth and i < len(rest):
                    depth += {"(": 1, ")": -1}.get(rest[i], 0)
                    i += 1
                if rest[i:].lstrip().startswith("{"):
                    defined[m.group(1)] = f[:-2]
    bad = []
    for f in files:
        if not f.endswith(".h"):
            continue
        text = strip_comments(open(os.path.join(folder, f)).read())
        for name in sorted(set(re.findall(r"\b(\w+)\s*\(", text))):
            owner = defined.get(name)
            if owner and owner != f[:-2] and owner != "main":
                bad.append("%s/%s declares %s(), which %s.c defines" % (folder, f, name, owner))
    return bad, len(defined)

fails, modules, functions = 0, 0, 0
for folder in sys.argv[1:]:
    if not os.path.isdir(folder):
        continue
    graph = module_graph(folder)
    modules += len(graph)
    cycle = find_cycle(graph)
    if cycle:
        print("FAIL: include cycle in %s: %s" % (folder, " -> ".join(cycle)))
        fails += 1
    bad, n = misplaced_declarations(folder)
    functions += n
    for b in bad:
        print("FAIL: " + b)
        fails += 1
if modules == 0 or functions == 0:
    print("FAIL: no modules or functions found: the check is broken")
    sys.exit(1)
print("%d modules, %d functions in %s: %s" % (modules, functions, " ".join(sys.argv[1:]),
      "no include cycle, every function declared by its own module's header" if not fails else "%d problems" % fails))
sys.exit(1 if fails else 0)
PY
