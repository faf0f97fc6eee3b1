"""Finding and loading libeerl, checking its version, turning its error codes into exceptions.

This module owns the one ctypes.CDLL of the process and the prototypes of the C functions the
package calls. It does not own any eerl handle (session.py and agent.py do).

Where the library comes from, first match wins:
  1. $EERL_LIBRARY: that file and only that file (a failure to load it is an error, not a
     fall-through, so a typo does not silently pick up another libeerl);
  2. the libeerl.so* next to this package (the wheel carries one there: pip install .), and
     only that: when it fails to load, the error says why (a missing libjansson.so.4, say)
     rather than another libeerl of the system being taken in its place;
  3. where the package carries none, the system's library path (libeerl.so.<major>, then
     libeerl.so, then ctypes.util).
A library of another major version than this package is refused, and so is one whose C ABI
(eerl_abi_version(), absent before ABI 2) is not the ABI_VERSION this package's prototypes and
struct mirrors (_types.py) are written for: an older libeerl that says the same version string
would otherwise load and fail later in the first call that differs.
"""

import ctypes
import ctypes.util
import glob
import os
import re
import threading



def _package_version():
    """This package's version. Its one source is include/eerl/version.h: the wheel build writes
    it into eerl/_version.py; a package run from the source tree (python/eerl, as the tests run
    it) reads the header two directories up."""
    try:
        from ._version import version
        return version
    except ImportError:
        pass
    header = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "include", "eerl", "version.h")
    try:
        with open(header) as f:
            m = re.search(r'#define EERL_VERSION_STRING "([0-9]+\.[0-9]+\.[0-9]+)"', f.read())
    except OSError as e:
        raise ImportError("eerl cannot tell its own version: it has no eerl/_version.py (the "
                          "wheel build writes it) and %s cannot be read (%s): install the "
                          "package with pip install <eerl source directory>" % (header, e))
    if m is None:
        raise ImportError("eerl cannot tell its own version: %s has no EERL_VERSION_STRING "
                          '"MAJOR.MINOR.PATCH"' % header)
    return m.group(1)


__version__ = _package_version()
VERSION_MAJOR = int(__version__.split(".")[0])
# include/eerl/version.h's EERL_ABI_VERSION for the prototypes here and the struct mirrors of
# _types.py (test_binding checks the two agree). A library without eerl_abi_version() is ABI 1.
ABI_VERSION = 2

_lock = threading.Lock()
_lib = None
_lib_path = None


class EerlError(Exception):
    """An eerl C function failed. code: the negative EERL_E* code; name: "EERL_EINVAL" ...;
    message: eerl_strerror(code); detail: what the handle said about the failing call, if any."""

    def __init__(self, code, what="", detail=""):
        self.code = int(code)
        lib = _lib
        if lib is not None:
            self.name = lib.eerl_err_name(self.code).decode()
            self.message = lib.eerl_strerror(self.code).decode()
        else:
            self.name, self.message = "EERL_UNKNOWN", "error %d" % self.code
        self.what = what
        self.detail = detail or ""
        text = self.message
        if self.message.split(":")[0] in self.detail:
            text = self.detail  # the detail already says what the code says: say it once
        elif self.detail:
            text += ": " + self.detail
        if what:
            text = "%s: %s" % (what, text)
        super().__init__("%s (%s)" % (text, self.name))


class LibraryNotFound(EerlError, OSError):
    """libeerl could not be found or loaded."""

    def __init__(self, text):
        Exception.__init__(self, text)
        self.code, self.name, self.message, self.what, self.detail = 0, "", text, "", ""


class VersionMismatch(EerlError):
    """The libeerl found has another major version than this package."""

    def __init__(self, text):
        Exception.__init__(self, text)
        self.code, self.name, self.message, self.what, self.detail = -21, "EERL_EVERSION", text, "", ""


def _candidates():
    """(names to try in order, where they come from: "env", "package" or "system")."""
    env = os.environ.get("EERL_LIBRARY")
    if env:
        return [env], "env"
    here = os.path.dirname(os.path.abspath(__file__))
    local = sorted(glob.glob(os.path.join(here, "libeerl.so*")), key=len)
    if local:
        return local, "package"
    system = ["libeerl.so.%d" % VERSION_MAJOR, "libeerl.so"]
    found = ctypes.util.find_library("eerl")
    if found:
        system.append(found)
    return system, "system"


def _declare(lib):
    """Prototypes of the always-present functions (error and version). Modules that wrap other
    parts declare theirs through declare()."""
    lib.eerl_version.restype = ctypes.c_uint
    lib.eerl_version.argtypes = []
    lib.eerl_version_string.restype = ctypes.c_char_p
    lib.eerl_version_string.argtypes = []
    lib.eerl_strerror.restype = ctypes.c_char_p
    lib.eerl_strerror.argtypes = [ctypes.c_int]
    lib.eerl_err_name.restype = ctypes.c_char_p
    lib.eerl_err_name.argtypes = [ctypes.c_int]


def _not_loaded(origin, names, errors):
    if origin == "env":
        return "cannot load EERL_LIBRARY=%s: %s" % (names[0], errors[0])
    if origin == "package":
        return ("cannot load the libeerl of this package (%s): no other libeerl is tried in "
                "its place. Install what it needs (the error names the missing library), "
                "reinstall the package (pip install <eerl source directory>), or name another "
                "libeerl with EERL_LIBRARY=/path/to/libeerl.so" % "; ".join(errors))
    return ("libeerl not found (tried %s). Install this package from eerl's source "
            "directory (pip install ., which builds libeerl into it), or build eerl "
            "(cmake --build build) and set EERL_LIBRARY=/path/to/libeerl.so, or install "
            "it (cmake --install)" % "; ".join(errors))


def _check_release(lib, path):
    """VersionMismatch unless lib (loaded from path) has this package's major version and C
    ABI."""
    text = lib.eerl_version_string().decode(errors="replace")
    major = lib.eerl_version() >> 16
    if major != VERSION_MAJOR:
        raise VersionMismatch(
            "%s is libeerl %s (major %d), but this eerl Python package %s needs major %d: "
            "install the matching package or point EERL_LIBRARY at a libeerl %d.x"
            % (path, text, major, __version__, VERSION_MAJOR, VERSION_MAJOR))
    fn = getattr(lib, "eerl_abi_version", None)
    if fn is not None:
        fn.restype, fn.argtypes = ctypes.c_uint, []
    abi = 1 if fn is None else fn()
    if abi != ABI_VERSION:
        raise VersionMismatch(
            "%s is libeerl %s of C ABI %d%s, but this eerl Python package %s is written for "
            "ABI %d: its calls would misread that library. Install the package and the "
            "library of one release (pip install <eerl source directory> builds both), or "
            "point EERL_LIBRARY at the libeerl of release %s"
            % (path, text, abi, " (it has no eerl_abi_version())" if fn is None else "",
               __version__, ABI_VERSION, __version__))


def load():
    """The loaded libeerl (a ctypes.CDLL), loading and checking it on first use."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        names, origin = _candidates()
        errors = []
        lib = None
        for name in names:
            try:
                lib = ctypes.CDLL(name)
                path = name
                break
            except OSError as e:
                errors.append("%s: %s" % (name, e))
        if lib is None:
            raise LibraryNotFound(_not_loaded(origin, names, errors))
        try:
            _declare(lib)
        except AttributeError as e:
            raise LibraryNotFound("%s is not libeerl: %s" % (path, e))
        _check_release(lib, path)
        _lib, _lib_path = lib, path
        return lib


def library_path():
    """Where the loaded libeerl came from (what was passed to dlopen)."""
    load()
    return _lib_path


def library_version():
    """"MAJOR.MINOR.PATCH" of the loaded libeerl."""
    return load().eerl_version_string().decode()


def has(name):
    """Whether the loaded libeerl exports the function name."""
    return hasattr(load(), name)


def declare(name, restype, argtypes):
    """Sets and returns the prototype of one C function (EerlError naming it when missing, so a
    library built without a part says which part)."""
    lib = load()
    try:
        fn = getattr(lib, name)
    except AttributeError:
        raise LibraryNotFound("%s (libeerl %s) lacks %s(): build a libeerl with that part"
                              % (_lib_path, lib.eerl_version_string().decode(), name))
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


def check(rc, what="", detail_fn=None):
    """Raises EerlError for a negative return code; returns rc otherwise."""
    if rc < 0:
        detail = ""
        if detail_fn is not None:
            try:
                d = detail_fn()
                detail = d.decode(errors="replace") if isinstance(d, bytes) else (d or "")
            except Exception:  # the detail is a courtesy; the code is what matters
                detail = ""
        raise EerlError(rc, what, detail)
    return rc


def strerror(code):
    return load().eerl_strerror(int(code)).decode()


def err_name(code):
    return load().eerl_err_name(int(code)).decode()
