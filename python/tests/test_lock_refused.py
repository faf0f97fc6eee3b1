"""A driver that refuses clock locking to root (the stand-in's lock_permitted=false; real drivers
do this on some virtualized GPUs): the doctor does not claim it works (it cannot ask without
changing a clock, so it says untested), and a run's error names the driver's refusal, not a
missing privilege it has."""

import json
import os
import subprocess
import sys

import pytest

from conftest import child_env, HANG_S, write_state
from eerl._lib import EerlError
from test_session import one_update

import eerl

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the refusal to root needs root")


def test_the_doctor_says_untested_as_root(tmp_path):
    state = write_state(tmp_path / "nvml.json", lock_permitted=False)
    r = subprocess.run([sys.executable, "-m", "eerl", "doctor", "--json"],
                       env=child_env(EERL_FAKE_NVML_STATE=state, EERL_SOCKET=""),
                       capture_output=True, text=True, timeout=HANG_S)
    perm = {c["check"]: c for c in json.loads(r.stdout)["checks"]}["permission"]
    assert "untested" in perm["message"], perm


def test_the_runs_error_names_the_drivers_refusal(tmp_path, monkeypatch):
    monkeypatch.setenv("EERL_FAKE_NVML_STATE", write_state(tmp_path / "nvml.json",
                                                           lock_permitted=False))
    with pytest.raises(EerlError) as e:
        with eerl.Session(mode="colocated", pools={"generation": [0], "training": [0]},
                          eerld=False, install_sigterm=False) as s:
            for u in range(60):
                one_update(s, u)
    msg = str(e.value)
    assert "the driver refuses clock locking even to root" in msg, msg
