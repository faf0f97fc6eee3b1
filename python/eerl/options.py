"""eerl's options, read from libeerl's one table (include/eerl/options.h): each option's name,
type, default per mode, bounds and a line of doc are written there once; the keywords of
eerl.Session and MultiNodeSession, the integrations' option lists and the checks here are
built from it, so a bad value gets the message the C library gives everywhere:

    >>> eerl.options.check("allowed_loss", 0.7)
    eerl.options.OptionError: allowed_loss 0.7 must be in (0, 0.5) (EERL_EINVAL)

Every check here runs before a device is opened or eerld is asked anything.
"""

import ctypes as C
import math
import operator

from . import _lib
from . import _types as T

_EINVAL = -1  # EERL_EINVAL: checked against the library below

# eerl_option_type and eerl_option_info.flags (eerl/options.h)
DOUBLE, UNSIGNED, ENUM = 0, 1, 2
EXPERIMENTAL, MIN_OPEN, MAX_OPEN, RUNTIME = 0x1, 0x2, 0x4, 0x8


class OptionError(_lib.EerlError, ValueError):
    """An option's value is out of its bounds (an EerlError with code EERL_EINVAL, and a
    ValueError). str(): the table's message, naming the option, the value and the bounds."""


class _Info(C.Structure):
    _fields_ = [("name", C.c_char_p), ("type", C.c_int), ("flags", C.c_uint),
                ("defaults", C.c_double * len(T.MODES)), ("min", C.c_double),
                ("max", C.c_double), ("doc", C.c_char_p)]


_fns = None
_table = None


def _c():
    global _fns
    if _fns is None:
        d = _lib.declare
        S = C.c_size_t
        _fns = {
            "count": d("eerl_option_count", S, []),
            "info": d("eerl_option_info_get", C.c_int, [S, C.POINTER(_Info)]),
            "check": d("eerl_option_check", C.c_int, [C.c_char_p, C.c_double, C.c_char_p, S]),
            "rt_set": d("eerl_rt_config_set", C.c_int, [C.POINTER(T.RtConfig), C.c_char_p,
                                                        C.c_double, C.c_char_p, S]),
        }
    return _fns


class Option:
    """One row of the table. defaults: {mode name: default}; min/max with min_open/max_open
    saying whether the bound itself is refused."""

    def __init__(self, info):
        self.name = info.name.decode()
        self.type = ("double", "unsigned", "enum")[info.type]
        self.defaults = {m: info.defaults[i] for m, i in T.MODES.items()}
        if info.type != DOUBLE:
            self.defaults = {m: int(v) for m, v in self.defaults.items()}
        self.min, self.max = info.min, info.max
        self.min_open = bool(info.flags & MIN_OPEN)
        self.max_open = bool(info.flags & MAX_OPEN)
        self.experimental = bool(info.flags & EXPERIMENTAL)
        self.runtime = bool(info.flags & RUNTIME)
        self.doc = info.doc.decode()

    @property
    def default(self):
        """The default of the colocated mode (the same in every mode for most options)."""
        return self.defaults["colocated"]

    def __repr__(self):
        return "<eerl option %s %s default %r>" % (self.name, self.type, self.default)


def table():
    """Every option of the loaded libeerl, in its order: {name: Option}."""
    global _table
    if _table is None:
        f = _c()
        rows = {}
        for i in range(f["count"]()):
            info = _Info()
            _lib.check(f["info"](i, C.byref(info)), "eerl_option_info_get")
            o = Option(info)
            rows[o.name] = o
        _table = rows
    return _table


def default(name, mode="colocated"):
    """The table's default of option name in mode."""
    return table()[name].defaults[mode]


def _number(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = operator.index(value)  # numpy integers
        except TypeError:
            try:
                value = float(value)  # numpy floats, Decimal
            except (TypeError, ValueError):
                raise OptionError(_EINVAL, "", "%s must be a number, not %r" % (name, value)) \
                    from None
    return float(value)


def check(name, value, what=""):
    """value (a number) if option name takes it; else OptionError with the table's message.
    what: the call it is for ("eerl.Session"), said first."""
    v = _number(name, value)
    why = C.create_string_buffer(256)
    rc = _c()["check"](name.encode(), v, why, len(why))
    if rc < 0:
        raise OptionError(rc, what, why.value.decode())
    if math.isfinite(v) and table()[name].type != "double":
        return int(v)
    return v


def set_rt(cfg, name, value):
    """Sets option name of an eerl_rt_config by name (checked by the library)."""
    why = C.create_string_buffer(256)
    rc = _c()["rt_set"](C.byref(cfg), name.encode(), _number(name, value), why, len(why))
    if rc < 0:
        raise OptionError(rc, "", why.value.decode())


def strategy_default():
    """The default strategy's name (the table's default of strategy)."""
    n = default("strategy")
    return next(k for k, v in T.STRATEGIES.items() if v == n)


def check_keywords(keywords, what):
    """Checks every table option among keywords ({name: value}; None stands for the default) and
    returns them with the defaults filled in; OptionError naming the first bad one, with what
    (the call they are for) first. Runs before any device, node or eerld is asked anything."""
    out = dict(keywords)
    for k, v in keywords.items():
        if k not in table():
            continue
        if k == "strategy":
            if v is None:
                out[k] = strategy_default()
            elif v not in T.STRATEGIES:
                raise OptionError(_EINVAL, what, "strategy %r: use one of %s"
                                  % (v, ", ".join(T.STRATEGIES)))
        elif v is None:
            out[k] = default(k)
        else:
            out[k] = check(k, v, what)
    return out
