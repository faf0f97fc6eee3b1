"""The package installs with pip from the source tree without a network (setuptools only)."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import HANG_S, LIB, PYROOT

import eerl


def test_pip_install_offline(tmp_path):
    try:
        import pip  # noqa: F401
    except ImportError:
        pytest.skip("pip is not installed for this python (Debian: python3-pip)")
    src = tmp_path / "src"
    shutil.copytree(PYROOT, str(src), ignore=shutil.ignore_patterns(
        "tests", "build", "*.egg-info", "__pycache__"))
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                        "--no-deps", "--no-index", "--disable-pip-version-check",
                        "--target", str(target), str(src)],
                       capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stdout + r.stderr
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(target), "EERL_LIBRARY": LIB}
    r = subprocess.run([sys.executable, "-c", "import eerl, eerl.integrations.trl, "
                        "eerl.multinode, eerl.report; print(eerl.__file__); "
                        "print(eerl.library_version())"],
                       env=env, capture_output=True, text=True, timeout=HANG_S, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0].startswith(str(target))
    assert r.stdout.split()[1] == eerl.library_version()
