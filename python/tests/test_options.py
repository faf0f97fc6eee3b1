"""The table of options (include/eerl/options.h, python/eerl/options.py): one default and one
range per option, the same message at every entry point, checked before any device, node or
eerld is asked anything (issue 56 item 2, issue 55 item 5)."""

import inspect
import os
import re

import pytest

from conftest import REPO

import eerl
from eerl import options
from eerl.integrations import _common

MESSAGE = "allowed_loss 0.7 must be in (0, 0.5)"


def _no_driver(monkeypatch, tmp_path):
    monkeypatch.setenv("EERL_NVML_LIBRARY", str(tmp_path / "libnvidia-ml.so.1"))
    monkeypatch.delenv("EERL_SOCKET", raising=False)


def test_session_checks_allowed_loss_before_the_driver(monkeypatch, tmp_path):
    _no_driver(monkeypatch, tmp_path)
    with pytest.raises(ValueError) as e:
        eerl.Session(allowed_loss=0.7, eerld=False)
    assert MESSAGE in str(e.value) and "driver" not in str(e.value)
    assert isinstance(e.value, eerl.EerlError) and e.value.name == "EERL_EINVAL"
    with pytest.raises(ValueError, match=re.escape("allowed_loss 0 must be in (0, 0.5)")):
        eerl.Session(allowed_loss=0, eerld=False)
    with pytest.raises(ValueError, match="strategy 'fast'"):
        eerl.Session(strategy="fast", eerld=False)
    with pytest.raises(ValueError, match="allowed_loss must be a number, not 'x'"):
        eerl.Session(allowed_loss="x", eerld=False)
    # A good value goes on to the device, which says what it lacks.
    with pytest.raises(eerl.EerlError) as e:
        eerl.Session(allowed_loss=0.03, eerld=False)
    assert e.value.name == "EERL_ENODRIVER"


class _Adapter:
    """A multi-node adapter that records whether anyone asked it anything."""

    def __init__(self):
        self.calls = []

    def call(self, *args, **kwargs):
        self.calls.append(args)
        raise AssertionError("a node was asked before the options were checked")

    def __getattr__(self, name):
        self.calls.append(name)
        raise AssertionError("adapter.%s was used before the options were checked" % name)


def test_multinode_checks_allowed_loss_before_any_node():
    from eerl.multinode import MultiNodeSession
    a = _Adapter()
    with pytest.raises(ValueError) as e:
        MultiNodeSession(a, pools={"generation": {"n0": [0]}, "training": {"n0": [0]}},
                         allowed_loss=0.7)
    assert MESSAGE in str(e.value) and e.value.what == "MultiNodeSession"
    with pytest.raises(ValueError, match="governor_peak_mhz = -1 is out of range"):
        MultiNodeSession(a, pools={"generation": {"n0": [0]}, "training": {"n0": [0]}},
                         governor_peak_mhz=-1)
    assert a.calls == []


def test_trl_callback_checks_at_construction(monkeypatch, tmp_path):
    pytest.importorskip("transformers")
    from eerl.integrations import trl as eerl_trl
    _no_driver(monkeypatch, tmp_path)
    with pytest.raises(ValueError) as e:
        eerl_trl.EerlCallback(allowed_loss=0.7)
    assert MESSAGE in str(e.value) and e.value.what == "EerlCallback"


def test_verl_options_are_checked_by_the_table():
    from eerl.integrations.verl import _job
    with pytest.raises(ValueError) as e:
        _job.options({"eerl": {"allowed_loss": 0.7}})
    assert MESSAGE in str(e.value) and "+eerl.allowed_loss" in str(e.value)


def test_defaults_come_from_the_table():
    t = options.table()
    assert t["allowed_loss"].defaults == {m: 0.02 for m in t["allowed_loss"].defaults}
    assert (t["allowed_loss"].min, t["allowed_loss"].max) == (0, 0.5)
    assert t["allowed_loss"].min_open and t["allowed_loss"].max_open
    assert t["calibration_updates"].defaults["inflight"] == 45
    assert t["eerl_revision"].experimental and not t["allowed_loss"].experimental
    assert options.strategy_default() == "eerl"
    # The session keywords that are options take the table's default (None: ask the table).
    for cls in (eerl.Session, __import__("eerl.multinode", fromlist=["x"]).MultiNodeSession):
        params = inspect.signature(cls.__init__).parameters
        assert params["allowed_loss"].default is None and params["strategy"].default is None


def test_runtime_options_are_keywords_everywhere():
    """Each runtime option of the table is a keyword of eerl.Session, of MultiNodeSession unless
    it has no meaning across nodes, and so of every integration's list (built from them)."""
    runtime = [o.name for o in options.table().values() if o.runtime]
    assert "allowed_loss" in runtime
    for name in runtime:
        assert name in _common.session_keywords(), name
        assert name in _common.multinode_keywords() or name in _common.SINGLE_NODE_ONLY, name
    from eerl.integrations.verl import _job
    assert set(runtime) <= set(_job.SESSION_KEYS)
    assert {"prior", "job_model"} <= set(_job.SESSION_KEYS)


def test_docs_keyword_table_matches_the_table():
    """docs/python.md's keyword table names each runtime option with the table's default and
    bounds (a test, so the docs cannot drift from the C table)."""
    with open(os.path.join(REPO, "docs", "python.md")) as f:
        text = f.read()
    for o in options.table().values():
        if not o.runtime or o.type != "double":
            continue
        row = next((ln for ln in text.splitlines() if ln.startswith("| `%s` |" % o.name)), None)
        assert row is not None, o.name
        bounds = "%s%g, %g%s" % ("(" if o.min_open else "[", o.min, o.max,
                                 ")" if o.max_open else "]")
        assert "default %g" % o.default in row and "bounds %s" % bounds in row, row
