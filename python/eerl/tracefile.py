"""Reading eerl traces (docs/trace-format.md): the one trace reader in Python, which eerl.report,
the tools (tools/twin_common.py) and anyone's notebook use. Every trace is written by the C trace
code (src/trace), on one node or many; this module only reads, and needs no libeerl.

    t = eerl.tracefile.read("run.jsonl")
    t.header["mode"], t.run, [u["energy_j"] for u in t.updates], t.others

A trace is JSON lines: a header, a run line and a resume record from a runtime session, one
line per update (a resumed job's trace appends more such segments, each from its header), the
"unexplained" line a session writes once when the work does not explain
the time (docs/runtime.md), the closing "estimate" line (what eerl saved, estimated from the
run alone; format version 2), and lines of other types (a multi-node session's node_lost or
node_error) that readers keep in `others`. A last line cut short (no newline, not JSON: a write that did
not finish) is left out with a RuntimeWarning naming it, as `eerl replay` does; a broken line
anywhere else is a TraceError naming the file and the line.
"""

import dataclasses
import json
import math
import os
import warnings


class TraceError(ValueError):
    """A file that is not an eerl trace, or a line of it that is not one: names both."""


@dataclasses.dataclass
class Trace:
    """One trace file, read. header: the header line; run, resume, unexplained, estimate: those
    lines (None when the trace has none); updates: the update lines in file order (a runtime's
    carry an "estimate" record from format version 2); others: the lines of any other type, in
    file order; cut: the line number of a last line cut short, or None.
    A resumed job's trace holds several segments, each a session's (its header has "appended":
    true after the first): header, run and resume are the first segment's, updates those of every
    segment in file order, the estimate the last segment's, and segments one dict per segment:
    its "header", "run", "resume" and "updates" (that segment's update lines)."""
    path: str
    header: dict
    run: dict = None
    resume: dict = None
    unexplained: dict = None
    estimate: dict = None
    updates: list = dataclasses.field(default_factory=list)
    others: list = dataclasses.field(default_factory=list)
    cut: int = None
    segments: list = dataclasses.field(default_factory=list)


def number(v):
    """A trace number as a float: numbers, and the strings "nan", "inf", "-inf" a trace writes
    for non-finite values."""
    if isinstance(v, str):
        if v not in ("nan", "inf", "-inf"):
            raise ValueError("%r is not a trace number" % v)
        return float(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError("%r is not a trace number" % (v,))
    return float(v)


def clock_mhz(v):
    """A trace clock as MHz, 0 for the governor ("governor", or 0)."""
    return 0 if v in (None, "governor") else int(v)


def finite(v):
    """number(v), or None where it is not finite."""
    x = number(v)
    return x if math.isfinite(x) else None


def _lines(path, f):
    """(line number, object) of every whole line; sets the cut line's number on the way."""
    for lineno, raw in enumerate(f, 1):
        line = raw.strip()
        if not line:
            continue
        try:
            o = json.loads(line)
            if not isinstance(o, dict) or not isinstance(o.get("type"), str):
                raise ValueError("no type")
        except ValueError:
            if not raw.endswith("\n"):  # the last line: a write that did not finish
                warnings.warn("%s:%d: the last line is cut short (a write that did not "
                              "finish: a full disk or a crash); every whole line before it "
                              "is read" % (path, lineno), RuntimeWarning, stacklevel=3)
                yield lineno, None
                return
            raise TraceError("%s:%d: not a trace line" % (path, lineno))
        yield lineno, o


def read(path):
    """Reads the trace at path into a Trace; TraceError naming the file (and the line) when it
    is not one."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise TraceError("'%s' is a directory; give the traces in it (e.g. '%s'/*.jsonl)"
                         % (path, path))
    try:
        f = open(path)
    except OSError as e:
        raise TraceError("cannot read %s: %s" % (path, e.strerror))
    t = None
    with f:
        for lineno, o in _lines(path, f):
            if o is None:
                if t is not None:
                    t.cut = lineno
                break
            kind = o["type"]
            if kind == "header":
                if o.get("format") != "eerl-trace":
                    raise TraceError("%s:%d: not an eerl trace header" % (path, lineno))
                if t is None:
                    t = Trace(path, o)
                t.segments.append({"header": o, "run": None, "resume": None, "updates": []})
            elif t is None:
                raise TraceError("%s:%d: %s line before the header" % (path, lineno, kind))
            elif kind in ("run", "resume"):
                t.segments[-1][kind] = o
                if getattr(t, kind) is None:
                    setattr(t, kind, o)
            elif kind in ("unexplained", "estimate"):
                setattr(t, kind, o)
            elif kind == "update":
                t.updates.append(o)
                t.segments[-1]["updates"].append(o)
            else:
                t.others.append(o)
    if t is None:
        raise TraceError("%s: no trace header (is this an eerl trace?)" % path)
    return t
