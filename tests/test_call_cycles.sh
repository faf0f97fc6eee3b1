#!/usr/bin/env bash
# Files that call each other one way only, checked on what the compiler made rather than on the
# includes: for each group of files checked (every C folder: src/, libeerl's and the tools
# library's, cli/ and programs/eerld), `nm` lists each object file's defined and undefined
# symbols; a file that leaves a symbol undefined which another file of the group defines uses
# that file (a call, or a table of calls such as a judge's ops). The
# graph of those uses must have no cycle. Fails naming the cycle and the symbols on each step.
# test_core_layering.sh and test_layering.sh check the includes; a call through a declaration
# written by hand, or a header shared by several files, would pass them and fail here.
# Usage: test_call_cycles.sh [BUILD-DIR] (default: the directory of $EERL_BIN).
set -u
build=${1:-$(dirname "${EERL_BIN:?EERL_BIN must name the eerl binary of the build to check}")}
command -v nm >/dev/null || { echo "FAIL: nm not found: apt-get install binutils"; exit 1; }
exec /usr/bin/python3 - "$build" <<'PY'
import graphlib
import os, re, subprocess, sys

build, src = sys.argv[1], os.environ.get("EERL_SOURCE_DIR", "")
# Each group: a name, and how its object files' paths look under the build directory (CMake
# puts a target's objects at CMakeFiles/<target>.dir/<source path>.o).
GROUPS = [
    ("src", re.compile(r"/CMakeFiles/eerl_(?:objects|tools)\.dir/(src/.+)\.o$"), ""),
    ("cli", re.compile(r"/CMakeFiles/eerl_cli\.dir/(cli/.+)\.o$"), ""),
    ("programs/eerld", re.compile(r"/programs/eerld/CMakeFiles/eerld\.dir/(.+)\.o$"),
     "programs/eerld/"),
]


def objects(pattern, prefix):
    """source file (path in the source tree) -> object file path; an object whose source is
    gone (a file moved or removed since the build began) is left out"""
    found = {}
    for root, _, names in os.walk(build):
        for n in names:
            path = os.path.join(root, n)
            m = pattern.search(path)
            if m and (not src or os.path.isfile(os.path.join(src, prefix + m.group(1)))):
                found[prefix + m.group(1)] = path
    return found


def symbols(obj):
    """(defined globals, undefined) of one object file"""
    out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(name)
        elif kind.isupper() or kind in "vw":
            defined.add(name)
    return defined, undefined


def graph_of(files):
    """file -> {file it uses: sorted symbols}"""
    syms = {f: symbols(o) for f, o in files.items()}
    owner = {}
    for f, (defined, _) in syms.items():
        for s in defined:
            owner[s] = f
    graph = {f: {} for f in files}
    for f, (_, undefined) in syms.items():
        for s in sorted(undefined):
            g = owner.get(s)
            if g and g != f:
                graph[f].setdefault(g, []).append(s)
    return graph


def find_cycle(graph):
    """A cycle [a, b, ..., a], each node using the next, or None (the standard graphlib)."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        return e.args[1][::-1]  # graphlib lists each node before the one that uses it
    return None


fails, summary = 0, []
for name, pattern, prefix in GROUPS:
    files = objects(pattern, prefix)
    if not files:
        print("FAIL: no object files of %s under %s: build first (the check is broken "
              "if the build is there)" % (name, build))
        fails += 1
        continue
    graph = graph_of(files)
    edges = sum(len(v) for v in graph.values())
    cycle = find_cycle(graph)
    if cycle:
        steps = ["%s uses %s (%s)" % (a, b, ", ".join(graph[a][b][:3]) +
                                          (", ..." if len(graph[a][b]) > 3 else ""))
                 for a, b in zip(cycle, cycle[1:])]
        print("FAIL: call cycle in %s: %s\n  %s" % (name, " -> ".join(cycle),
                                                     "\n  ".join(steps)))
        fails += 1
    summary.append("%s: %d files, %d uses between them" % (name, len(files), edges))
print("%s; %s" % ("; ".join(summary), "no call cycle" if not fails else "%d groups fail" % fails))
sys.exit(1 if fails else 0)
PY
