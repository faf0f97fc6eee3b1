#!/usr/bin/env bash
# Files that use each other one way only, in every C folder and in the Python package.
# C: checked on what the compiler made rather than on the includes: for each group of files
# checked (src/, libeerl's and the tools library's, cli/ and programs/eerld), `nm` lists each
# object file's defined and undefined symbols; a file that leaves a symbol undefined which
# another file of the group defines uses that file (a call, or a table of calls such as a
# judge's ops). test_core_layering.sh and test_layering.sh check the includes; a call through a
# declaration written by hand, or a header shared by several files, would pass them and fail here.
# Python (python/eerl): each module's imports, read with `ast` wherever they stand (at the top,
# inside a function or a class, under an `if`), relative or absolute (`eerl.`), `from . import x`
# where x is a module, and importlib.import_module("eerl...."); an import inside a function
# hides a circle from Python but not from this check.
# The graph of each group must have no cycle. Fails naming the cycle and, on each step, the
# symbols or the import lines. test_call_cycles_planted.sh plants cycles and sees this fail.
# Usage: test_call_cycles.sh [BUILD-DIR] [--only GROUP]... (BUILD-DIR default: the directory of
# $EERL_BIN; GROUP: src, cli, programs/eerld or python/eerl; default every group). The source
# tree is $EERL_SOURCE_DIR, else the one this script is in.
set -u
src=${EERL_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
exec /usr/bin/python3 - "$src" "$@" <<'PY'
import ast
import graphlib
import os, re, shutil, subprocess, sys

src, args = sys.argv[1], sys.argv[2:]
# Each C group: a name, and how its object files' paths look under the build directory (CMake
# puts a target's objects at CMakeFiles/<target>.dir/<source path>.o).
C_GROUPS = [
    ("src", re.compile(r"/CMakeFiles/eerl_(?:objects|tools)\.dir/(src/.+)\.o$"), ""),
    ("cli", re.compile(r"/CMakeFiles/eerl_cli\.dir/(cli/.+)\.o$"), ""),
    ("programs/eerld", re.compile(r"/programs/eerld/CMakeFiles/eerld\.dir/(.+)\.o$"),
     "programs/eerld/"),
]
PY_GROUPS = ["python/eerl"]


def usage(why):
    sys.exit("test_call_cycles.sh: %s\nusage: test_call_cycles.sh [BUILD-DIR] [--only GROUP]... "
             "(GROUP: %s)" % (why, ", ".join([g[0] for g in C_GROUPS] + PY_GROUPS)))


def parse(args):
    """(build directory or None, the groups to check)"""
    build, only = None, []
    while args:
        a = args.pop(0)
        if a == "--only":
            if not args:
                usage("--only needs a group")
            only.append(args.pop(0))
        elif build is None:
            build = a
        else:
            usage("one build directory only")
    names = [g[0] for g in C_GROUPS] + PY_GROUPS
    for g in only:
        if g not in names:
            usage("no group %s" % g)
    return build, only or names


# ---- C: who calls whom, from nm -------------------------------------------------------------

def objects(build, pattern, prefix):
    """source file (path in the source tree) -> object file path; an object whose source is
    gone (a file moved or removed since the build began) is left out; of two objects of one
    source (a file moved to another target since an earlier build) the newer"""
    found = {}
    for root, _, names in os.walk(build):
        for n in names:
            path = os.path.join(root, n)
            m = pattern.search(path)
            key = prefix + m.group(1) if m else None
            if key and os.path.isfile(os.path.join(src, key)) and \
                    (key not in found or os.path.getmtime(path) > os.path.getmtime(found[key])):
                found[key] = path
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


def c_graph(files):
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


# ---- Python: who imports whom, from ast -----------------------------------------------------

def py_modules(package):
    """module name (eerl.x.y) -> path of its file in the source tree"""
    top, found = os.path.basename(package), {}
    for root, dirs, names in os.walk(os.path.join(src, package)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for n in sorted(names):
            if n.endswith(".py"):
                rel = os.path.relpath(os.path.join(root, n), os.path.join(src, package))
                parts = [top] + rel[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts.pop()
                found[".".join(parts)] = os.path.join(package, rel)
    return found


def imported_names(node, here):
    """The dotted names an import statement (or importlib.import_module("...")) brings in, each
    as its candidates, best first (`from P import n`: P.n where that is a module, else P);
    here: the package a relative import starts from."""
    if isinstance(node, ast.Import):
        return [[a.name] for a in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = here.split(".")
            up = parts[:len(parts) - (node.level - 1)]
            base = ".".join(up + ([base] if base else []))
        return [[base + "." + a.name, base] for a in node.names]
    f = node.func
    if (isinstance(f, ast.Attribute) and f.attr == "import_module" and node.args and
            isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return [[node.args[0].value]]
    return []


def resolve(candidates, modules):
    """The first candidate that is a module of the package, else None (a module outside it, or
    one written at build time such as the wheel's eerl/_version.py)."""
    return next((c for c in candidates if c in modules), None)


def py_imports(module, path, modules):
    """{module it imports: ["line N: the statement", ...]}"""
    text = open(os.path.join(src, path)).read()
    tree = ast.parse(text, path)
    here = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    out = {}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom, ast.Call)):
            continue
        targets = {resolve(c, modules) for c in imported_names(node, here)} - {None, module}
        if not targets:
            continue
        stmt = " ".join((ast.get_source_segment(text, node) or "").split())
        for target in sorted(targets):
            out.setdefault(target, []).append("line %d: %s" % (node.lineno, stmt))
    return out


def py_graph(package):
    """file -> {file it imports: the import lines}"""
    modules = py_modules(package)
    return {path: {modules[m]: lines for m, lines in py_imports(name, path, modules).items()}
            for name, path in modules.items()}


# ---- the check ------------------------------------------------------------------------------

def find_cycle(graph):
    """A cycle [a, b, ..., a], each node using the next, or None (the standard graphlib)."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        return e.args[1][::-1]  # graphlib lists each node before the one that uses it
    return None


def check(name, graph, verb, sep):
    """None, or the failure naming the cycle of graph and what each step uses"""
    cycle = find_cycle(graph)
    if not cycle:
        return None
    steps = ["%s %s %s (%s)" % (a, verb, b, sep.join(graph[a][b][:3]) +
                                (sep + "..." if len(graph[a][b]) > 3 else ""))
             for a, b in zip(cycle, cycle[1:])]
    kind = "import" if verb == "imports" else "call"
    return "FAIL: %s cycle in %s: %s\n  %s" % (kind, name, " -> ".join(cycle), "\n  ".join(steps))


def main():
    build, groups = parse(args)
    fails, summary = 0, []
    c_wanted = [g for g in C_GROUPS if g[0] in groups]
    if c_wanted:
        if shutil.which("nm") is None:
            print("FAIL: nm not found: apt-get install binutils")
            return 1
        if build is None:
            if not os.environ.get("EERL_BIN"):
                usage("give BUILD-DIR, or EERL_BIN naming the eerl binary of the build to check")
            build = os.path.dirname(os.environ["EERL_BIN"])
    for name, pattern, prefix in c_wanted:
        files = objects(build, pattern, prefix)
        if not files:
            print("FAIL: no object files of %s under %s: build first (the check is broken "
                  "if the build is there)" % (name, build))
            fails += 1
            continue
        graph = c_graph(files)
        failed = check(name, graph, "uses", ", ")
        if failed:
            print(failed)
            fails += 1
        summary.append("%s: %d files, %d uses between them"
                       % (name, len(files), sum(len(v) for v in graph.values())))
    for name in (g for g in PY_GROUPS if g in groups):
        graph = py_graph(name)
        if not graph:
            print("FAIL: no Python module under %s/%s" % (src, name))
            fails += 1
            continue
        failed = check(name, graph, "imports", "; ")
        if failed:
            print(failed)
            fails += 1
        summary.append("%s: %d modules, %d imports between them"
                       % (name, len(graph), sum(len(v) for v in graph.values())))
    verdict = "no cycle" if not fails else "%d of %d groups fail" % (fails, len(groups))
    print("%s; %s" % ("; ".join(summary), verdict))
    return 1 if fails else 0


sys.exit(main())
PY
