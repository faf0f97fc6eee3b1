"""The binding: finding the library, refusing another major version, C errors as exceptions,
struct layouts matching the headers."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import child_env, HANG_S, LIB, REPO

import eerl
from eerl import _lib, _types


def run_py(code, **env):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=child_env(**env),
                          capture_output=True, text=True, timeout=HANG_S)


def copy_package(tmp_path, *ignore):
    """python/eerl copied to tmp_path/pkg/eerl, away from the source tree, with the _version.py
    that the wheel build writes into it."""
    pkg = tmp_path / "pkg"
    shutil.copytree(os.path.join(REPO, "python", "eerl"), str(pkg / "eerl"),
                    ignore=shutil.ignore_patterns("__pycache__", *ignore))
    (pkg / "eerl" / "_version.py").write_text('version = "%s"\n' % eerl.__version__)
    return pkg


def test_loads_the_library_named_by_eerl_library():
    assert os.path.samefile(eerl.library_path(), LIB)
    assert eerl.library_version() == eerl.__version__


def test_missing_eerl_library_is_an_error_naming_the_path(tmp_path):
    bad = str(tmp_path / "nope" / "libeerl.so")
    r = run_py("import eerl; eerl.library_version()", EERL_LIBRARY=bad)
    assert r.returncode != 0
    assert "LibraryNotFound" in r.stderr and bad in r.stderr, r.stderr


def test_not_found_anywhere_says_what_to_do(tmp_path):
    # No EERL_LIBRARY, nothing beside the package (a copy of it elsewhere), no system libeerl.
    pkg = copy_package(tmp_path, "libeerl.so*")
    env = child_env()
    env.pop("EERL_LIBRARY")
    env["PYTHONPATH"] = str(pkg)
    env["LD_LIBRARY_PATH"] = ""
    r = subprocess.run([sys.executable, "-c", "import eerl; eerl.library_version()"], env=env,
                       capture_output=True, text=True, timeout=HANG_S, cwd=str(tmp_path))
    if r.returncode == 0:
        pytest.skip("a libeerl is installed on the system path")
    assert "libeerl not found" in r.stderr and "EERL_LIBRARY" in r.stderr, r.stderr


def test_a_package_that_cannot_tell_its_version_says_why(tmp_path):
    # Neither the wheel's _version.py nor a source tree's include/eerl/version.h: import fails
    # naming what it looked for, rather than checking libeerl against a guessed major.
    pkg = copy_package(tmp_path)
    os.remove(str(pkg / "eerl" / "_version.py"))
    env = child_env()
    env["PYTHONPATH"] = str(pkg)
    r = subprocess.run([sys.executable, "-c", "import eerl"], env=env, capture_output=True,
                       text=True, timeout=HANG_S, cwd=str(tmp_path))
    assert r.returncode != 0
    header = str(tmp_path / "include" / "eerl" / "version.h")
    assert "cannot tell its own version" in r.stderr and header in r.stderr, r.stderr


def test_library_beside_the_package_is_found(tmp_path):
    pkg = copy_package(tmp_path)
    shutil.copy(LIB, str(pkg / "eerl" / "libeerl.so"))
    env = child_env()
    env.pop("EERL_LIBRARY")
    env["PYTHONPATH"] = str(pkg)
    r = subprocess.run([sys.executable, "-c", "import eerl; print(eerl.library_path())"],
                       env=env, capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(pkg / "eerl" / "libeerl.so")


def _compile(tmp_path, name, src):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    c = tmp_path / (name + ".c")
    c.write_text(src)
    out = tmp_path / name
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(out), str(c)] if name.endswith(".so")
                   else [cc, "-I", os.path.join(REPO, "include"), "-o", str(out), str(c)],
                   check=True, capture_output=True, text=True)
    return str(out)


def test_another_major_version_is_refused(tmp_path):
    so = _compile(tmp_path, "libeerl.so", textwrap.dedent("""
        unsigned eerl_version(void) { return (7u << 16) | (2u << 8) | 1u; }
        const char *eerl_version_string(void) { return "7.2.1"; }
        const char *eerl_strerror(int e) { (void)e; return "x"; }
        const char *eerl_err_name(int e) { (void)e; return "x"; }
    """))
    r = run_py("import eerl; eerl.library_version()", EERL_LIBRARY=so)
    assert r.returncode != 0
    assert "VersionMismatch" in r.stderr, r.stderr
    assert "7.2.1" in r.stderr and "needs major 0" in r.stderr, r.stderr


def _same_version_library(tmp_path, abi_fn=""):
    """A libeerl that says this package's version, with abi_fn (C text) for its ABI: what an
    older build of the same version string looks like to the package."""
    major, minor, patch = (int(x) for x in eerl.__version__.split("."))
    return _compile(tmp_path, "libold.so", textwrap.dedent("""\
        unsigned eerl_version(void) { return (%du << 16) | (%du << 8) | %du; }
        const char *eerl_version_string(void) { return "%s"; }
        const char *eerl_strerror(int e) { (void)e; return "x"; }
        const char *eerl_err_name(int e) { (void)e; return "x"; }
        %s
    """ % (major, minor, patch, eerl.__version__, abi_fn)))


def test_the_abi_number_is_the_headers():
    with open(os.path.join(REPO, "include", "eerl", "version.h")) as f:
        header = f.read()
    assert "#define EERL_ABI_VERSION %d\n" % _lib.ABI_VERSION in header
    assert _lib.load().eerl_abi_version() == _lib.ABI_VERSION


@pytest.mark.parametrize("abi_fn, says", [
    ("", "of C ABI 1 (it has no eerl_abi_version())"),
    ("unsigned eerl_abi_version(void) { return 99; }", "of C ABI 99,"),
])
def test_a_library_of_another_abi_with_the_same_version_is_refused(tmp_path, abi_fn, says):
    # An older libeerl that says the package's own version (the ABI grew without the version
    # changing): refused at load, before a Session misreads it.
    so = _same_version_library(tmp_path, abi_fn)
    r = run_py("import eerl; eerl.Session(observe_only=True)", EERL_LIBRARY=so)
    assert r.returncode != 0 and "VersionMismatch" in r.stderr, r.stderr
    assert "%s is libeerl %s %s" % (so, eerl.__version__, says) in r.stderr, r.stderr
    assert "is written for ABI %d" % _lib.ABI_VERSION in r.stderr, r.stderr


def test_the_packages_own_library_failing_says_why_and_takes_no_other(tmp_path):
    # The package's libeerl.so needs a library that is missing (as a wheel's libeerl without
    # libjansson.so.4); a good libeerl is on the library path. The error names the missing
    # library, and the other libeerl is not taken in its place.
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    pkg = copy_package(tmp_path, "libeerl.so*")
    dep = tmp_path / "dep"
    dep.mkdir()
    (dep / "d.c").write_text("int eerl_test_dep(void) { return 1; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(dep / "libeerlgone.so"),
                    str(dep / "d.c")], check=True)
    (dep / "l.c").write_text("int eerl_test_dep(void);\nint f(void) { return eerl_test_dep(); }\n")
    own = pkg / "eerl" / "libeerl.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(own), str(dep / "l.c"), "-L", str(dep),
                    "-leerlgone"], check=True)
    os.remove(str(dep / "libeerlgone.so"))
    system = tmp_path / "system"
    system.mkdir()
    shutil.copy(LIB, str(system / ("libeerl.so.%d" % _lib.VERSION_MAJOR)))
    env = child_env()
    env.pop("EERL_LIBRARY")
    env["PYTHONPATH"] = str(pkg)
    env["LD_LIBRARY_PATH"] = str(system)
    r = subprocess.run([sys.executable, "-c", "import eerl; print(eerl.library_path())"],
                       env=env, capture_output=True, text=True, timeout=HANG_S, cwd=str(tmp_path))
    assert r.returncode != 0, r.stdout
    assert "LibraryNotFound: cannot load the libeerl of this package (%s: " % own in r.stderr, \
        r.stderr
    assert "libeerlgone.so" in r.stderr and "EERL_LIBRARY" in r.stderr, r.stderr
    # Named by EERL_LIBRARY, the other one is taken.
    env["EERL_LIBRARY"] = str(system / ("libeerl.so.%d" % _lib.VERSION_MAJOR))
    r = subprocess.run([sys.executable, "-c", "import eerl; print(eerl.library_path())"],
                       env=env, capture_output=True, text=True, timeout=HANG_S, cwd=str(tmp_path))
    assert r.returncode == 0 and r.stdout.strip() == env["EERL_LIBRARY"], r.stderr


def test_a_library_that_is_not_libeerl_is_refused(tmp_path):
    so = _compile(tmp_path, "libother.so", "int something(void) { return 1; }\n")
    r = run_py("import eerl; eerl.library_version()", EERL_LIBRARY=so)
    assert r.returncode != 0 and "is not libeerl" in r.stderr, r.stderr


def test_errors_carry_eerl_strerror_and_name():
    e = eerl.EerlError(-1, "doing x", "value 7 is bad")
    assert e.code == -1 and e.name == "EERL_EINVAL" and e.message == "invalid argument"
    assert str(e) == "doing x: invalid argument: value 7 is bad (EERL_EINVAL)"
    perm = eerl.EerlError(-5)
    assert "CAP_SYS_ADMIN" in str(perm) and perm.name == "EERL_ENOPERM"
    with pytest.raises(eerl.EerlError) as ei:
        _lib.check(-17, "opening y", lambda: b"no such thing")
    assert ei.value.name == "EERL_ENOENT" and "no such thing" in str(ei.value)
    assert _lib.check(3) == 3


def test_struct_layouts_match_the_headers(tmp_path):
    """Every ctypes mirror has the size and field offsets the C compiler gives the header."""
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include \"eerl/core.h\""]
    for h in ("runtime.h", "agent.h", "doctor.h"):
        if os.path.exists(os.path.join(REPO, "include", "eerl", h)):
            lines.append("#include \"eerl/%s\"" % h)
    lines.append("int main(void) {")
    expect = {}
    for cname, st in _types.LAYOUTS.items():
        hdr = {"eerl_rt": "runtime.h", "struct eerl_agent": "agent.h",
               "struct eerl_doctor": "doctor.h"}
        needs = next((v for k, v in hdr.items() if cname.startswith(k)), None)
        if needs and not os.path.exists(os.path.join(REPO, "include", "eerl", needs)):
            continue
        lines.append('printf("%s %%zu\\n", sizeof(%s));' % (cname.replace(" ", "_"), cname))
        expect[cname.replace(" ", "_")] = __import__("ctypes").sizeof(st)
        for fname, _ in st._fields_:
            key = "%s.%s" % (cname.replace(" ", "_"), fname)
            lines.append('printf("%s %%zu\\n", offsetof(%s, %s));' % (key, cname, fname))
            expect[key] = getattr(st, fname).offset
    lines.append("return 0; }")
    exe = _compile(tmp_path, "layout", "\n".join(lines) + "\n")
    out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    got = dict((k, int(v)) for k, v in (l.split() for l in out.splitlines()))
    assert got == expect


def test_phase_names_match_the_c_names():
    assert list(_types.PHASES) == ["generation", "logprob", "training", "refit", "other"]
    assert _types.phase_id("log-prob") == ("logprob", 1)
    with pytest.raises(ValueError, match="unknown phase 'rollout'"):
        _types.phase_id("rollout")
