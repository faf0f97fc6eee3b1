"""eerl.Session's eerld= keyword, decided by the runtime's one rule (include/eerl/runtime.h,
eerl_rt_config.eerld; docs/eerld.md, "When a session goes through eerld"): None goes through
eerld when $EERL_SOCKET is set (or the default socket exists), True and a socket path always,
False never. Through eerld the session leases its GPUs at its start and reads them through the
same connection; an observe-only session takes no lease; errors name the socket."""

import json
import os

import pytest

from eerld_nodes import start_nodes
from test_session import POOLS, one_update

import eerl


@pytest.fixture
def eerld_node(tmp_path):
    node = start_nodes(tmp_path / "nodes", 1, n_gpus=2)[0]
    yield node
    node.stop()


def backend(trace):
    """The device the trace's run line names (nvml, eerld)."""
    with open(trace) as f:
        return [json.loads(x) for x in f if '"run"' in x][0]["device"]


def test_auto_goes_through_eerld_when_eerl_socket_is_set(eerld_node, tmp_path, monkeypatch):
    monkeypatch.setenv("EERL_SOCKET", eerld_node.socket)
    trace = str(tmp_path / "auto.jsonl")
    with eerl.Session(pools=POOLS, trace=trace, install_sigterm=False) as s:
        # leased at the start, before any clock is set
        assert [h and h["pid"] for h in eerld_node.holders()] == [os.getpid()] * 2
        assert one_update(s, 1).accepted
    assert backend(trace) == "eerld"
    assert eerld_node.holders() == [None, None]


def test_observe_only_reads_through_eerld_and_takes_no_lease(eerld_node, tmp_path):
    trace = str(tmp_path / "observe.jsonl")
    with eerl.Session(pools=POOLS, trace=trace, observe_only=True, eerld=eerld_node.socket,
                      install_sigterm=False) as s:
        one_update(s, 1)
        assert eerld_node.holders() == [None, None]
    assert backend(trace) == "eerld"
    assert eerld_node.locks() == [(None, None)] * 2


def test_off_never_goes_through_eerld(eerld_node, node, tmp_path, monkeypatch):
    """eerld=False with $EERL_SOCKET set: NVML in this process (the node fixture's stand-in)."""
    monkeypatch.setenv("EERL_SOCKET", eerld_node.socket)
    trace = str(tmp_path / "off.jsonl")
    with eerl.Session(pools=POOLS, trace=trace, eerld=False, install_sigterm=False) as s:
        one_update(s, 1)
        assert eerld_node.holders() == [None, None]
    assert backend(trace) == "nvml"


def test_errors_name_the_socket(eerld_node, tmp_path, monkeypatch):
    none = str(tmp_path / "none.sock")
    with pytest.raises(eerl.EerlError) as e:
        eerl.Session(pools=POOLS, eerld=none, install_sigterm=False)
    assert e.value.name == "EERL_ENOENT" and none in str(e.value)
    monkeypatch.setenv("EERL_SOCKET", none)
    with pytest.raises(eerl.EerlError) as e:
        eerl.Session(pools=POOLS, eerld=True, install_sigterm=False)
    assert none in str(e.value)
    # a GPU another client holds: refused at the start, naming the socket and the GPUs
    with eerl.Session(pools={"generation": [0], "training": [0]}, eerld=eerld_node.socket,
                      install_sigterm=False):
        with pytest.raises(eerl.EerlError) as e:
            eerl.Session(pools=POOLS, eerld=eerld_node.socket, install_sigterm=False)
        assert e.value.name == "EERL_EBUSY", str(e.value)
        assert "eerld at %s: leasing GPUs 0, 1" % eerld_node.socket in str(e.value)
        assert eerld_node.holders()[1] is None  # all or none
