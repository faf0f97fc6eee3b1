"""python -m eerl doctor: what a user needs to know before the first run, on one screen.

    python -m eerl doctor [--json] [--socket PATH]

Runs libeerl's node checks (eerl_doctor_run, the same as `eerl doctor`: NVML and the driver, the
GPUs and their clocks, eerld and its policy for this uid, permission to lock clocks) in this
Python process, so with its uid, capabilities and environment, and adds what only Python can
see: whether this package and the libeerl it loads are one release, and whether the installed
frameworks are the releases eerl is tested with (eerl._tested). Each line is ok, warning or
error with what to do; the exit status is 1 when any is an error (a controlling run would
fail). docs/doctor.md says what each line checks.

From Python: eerl.doctor.checks() returns the lines as dicts.
"""

import argparse
import ctypes as C
import importlib.metadata
import json
import sys

from . import _lib
from . import _types as T
from ._tested import SAME_AS, TESTED


def _check(name, status, message, fix=""):
    return {"check": name, "status": status, "message": message, "fix": fix}


def _public(version):
    """"2.13.0" of "2.13.0+cpu": a local build label does not make another release."""
    return version.split("+", 1)[0]


def package_check(package_version):
    """The package against the libeerl it loads: of another major version or C ABI (it does not
    load: every Session would fail), an error; of another release of the same ABI, a warning.
    Returns (check, whether the library loaded)."""
    try:
        lib_version = _lib.library_version()
    except _lib.EerlError as e:  # LibraryNotFound, VersionMismatch
        fix = ("install the package and libeerl of one release (pip install <eerl source "
               "directory> builds both), or point EERL_LIBRARY at the libeerl of release %s"
               % package_version if isinstance(e, _lib.VersionMismatch) else
               "build libeerl (cmake --build build) and set EERL_LIBRARY to its libeerl.so, or "
               "install it (cmake --install)")
        return _check("package", "error", "eerl package %s: %s" % (package_version, e), fix), False
    where = _lib.library_path()
    if lib_version == package_version:
        return _check("package", "ok", "eerl package %s with libeerl %s (%s)"
                      % (package_version, lib_version, where)), True
    return _check("package", "warning",
                  "eerl package %s with libeerl %s (%s): one major version, so it loads, but "
                  "they are different releases" % (package_version, lib_version, where),
                  "install the package and the library of one release (pip install "
                  "eerl==%s, or set EERL_LIBRARY to a libeerl %s)"
                  % (lib_version, package_version)), True


def library_checks(socket=None):
    """eerl_doctor_run in this process, as check dicts (the order `eerl doctor` prints)."""
    if not _lib.has("eerl_doctor_run"):
        return [_check("library", "warning",
                       "libeerl %s (%s) has no node checks (eerl_doctor_run)"
                       % (_lib.library_version(), _lib.library_path()),
                       "install a newer libeerl, or run `eerl doctor` of a release that has it")]
    run = _lib.declare("eerl_doctor_run", C.c_int,
                       [C.c_char_p, C.POINTER(T.DoctorCheck), C.c_size_t,
                        C.POINTER(C.c_size_t)])
    out = (T.DoctorCheck * T.DOCTOR_CHECKS_MAX)()
    n = C.c_size_t(0)
    rc = run(socket.encode() if socket else None, out, len(out), C.byref(n))
    if rc < 0 and _lib.err_name(rc) != "EERL_EOVERFLOW":
        _lib.check(rc, "running the node checks")
    return [_check(c.name.decode(errors="replace"), T.DOCTOR_LEVELS[c.level],
                   c.message.decode(errors="replace"), c.fix.decode(errors="replace"))
            for c in out[:n.value]]


def installed_version(dist):
    """The installed release of distribution dist (or of a distribution that is the same
    framework under another name, _tested.SAME_AS), or None. Read from the metadata: nothing is
    imported, so a broken or slow framework cannot hang the doctor."""
    for name in SAME_AS.get(dist, (dist,)):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return None


def framework_checks(tested=None):
    """One line per framework of the tested table: installed release against the tested one."""
    lines = []
    for dist, want in (TESTED if tested is None else tested).items():
        name = "framework %s" % dist
        have = installed_version(dist)
        if have is None:
            lines.append(_check(name, "ok", "%s is not installed%s" % (
                dist, " (eerl is tested with %s)" % want if want else "")))
        elif want is None:
            lines.append(_check(name, "warning",
                                "%s %s is installed; eerl is not tested with %s"
                                % (dist, have, dist),
                                "eerl's integrations are tested without it; if one misbehaves "
                                "beside it, report that with this line"))
        elif _public(have) != want:
            lines.append(_check(name, "warning",
                                "%s %s is installed; eerl is tested with %s %s"
                                % (dist, have, dist, want),
                                "if an integration refuses or misbehaves, install %s==%s "
                                "(python/requirements/test.in pins the tested set)"
                                % (dist, want)))
        else:
            lines.append(_check(name, "ok", "%s %s, the release eerl is tested with"
                                % (dist, have)))
    return lines


def checks(socket=None):
    """Every line of `python -m eerl doctor`, as dicts with check, status, message, fix."""
    from . import __version__
    pkg, loaded = package_check(__version__)
    lines = [pkg]
    if loaded:
        lines += library_checks(socket)
    return lines + framework_checks()


def summary(lines):
    errors = sum(1 for c in lines if c["status"] == "error")
    warnings = sum(1 for c in lines if c["status"] == "warning")
    return {"ok": errors == 0, "errors": errors, "warnings": warnings, "checks": lines}


def render(result, out=sys.stdout):
    """The one-screen form, as `eerl doctor` prints it."""
    lines = result["checks"]
    w = max([5] + [len(c["check"]) for c in lines])
    for c in lines:
        out.write("%-7s  %-*s  %s\n" % (c["status"], w, c["check"], c["message"]))
        if c["fix"]:
            out.write("%-7s  %-*s  -> %s\n" % ("", w, "", c["fix"]))
    e, wn = result["errors"], result["warnings"]
    if e:
        out.write("\n%d error%s, %d warning%s: a controlling run on this node would fail\n"
                  % (e, "" if e == 1 else "s", wn, "" if wn == 1 else "s"))
    elif wn:
        out.write("\n%d warning%s, no error: runs can start\n" % (wn, "" if wn == 1 else "s"))
    else:
        out.write("\nall checks ok\n")


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m eerl doctor",
        description="Checks what a run on this node needs, in this Python process: the package "
                    "against libeerl, NVML and the driver, the GPUs and their clocks, eerld and "
                    "its policy, permission to lock clocks, and the installed frameworks against "
                    "the releases eerl is tested with. Exit status 1 when any line is an error "
                    "(docs/doctor.md).")
    ap.add_argument("--json", action="store_true",
                    help='print one JSON object: {"ok", "errors", "warnings", "checks"}')
    ap.add_argument("--socket", metavar="PATH",
                    help="check the eerld at PATH (default: $EERL_SOCKET, else its default "
                         "socket when it exists, as a session chooses)")
    args = ap.parse_args(argv)
    if args.socket == "":
        ap.error("--socket needs the path of eerld's socket")
    result = summary(checks(args.socket))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        render(result)
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
