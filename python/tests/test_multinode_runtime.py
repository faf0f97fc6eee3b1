"""MultiNodeSession is eerl.Session's runtime (the C runtime) over the GPUs of several nodes
(issue 37): what that gives a multi-node job that it did not have, each against real eerlds over
stand-in GPUs, the nodes reached through NodeServers of this process (eerld_nodes.LocalAdapter):
resume across nodes, a trace that `eerl replay` reads whatever the work figures were, pools
given with a node named two ways or in another order, and no trace line written in Python."""

import builtins
import json
import math
import os
import subprocess

import pytest

from conftest import EERL_BIN, HANG_S, needs_runtime
import eerld_nodes
from test_multinode_given_up import holders
from test_session import one_update

from eerl import multinode

pytestmark = needs_runtime

BOTH = {"generation": {0: [0, 1], 1: [0, 1]}, "training": {0: [0, 1], 1: [0, 1]}}


@pytest.fixture
def nodes(tmp_path):
    ns = eerld_nodes.start_nodes(tmp_path / "nodes", 3)
    try:
        yield ns
    finally:
        for n in ns:
            n.stop()


@pytest.fixture
def adapter(nodes):
    ad = eerld_nodes.LocalAdapter([n.socket for n in nodes])
    try:
        yield ad
    finally:
        ad.close()


def lines(path):
    return [json.loads(x) for x in open(path)]


def replay(trace):
    r = subprocess.run([EERL_BIN, "replay", "--quiet", trace], capture_output=True, text=True,
                       timeout=HANG_S)
    assert r.returncode == 0 and "0 mismatches" in r.stdout, r.stdout + r.stderr
    return r.stdout


def test_a_job_saved_and_resumed_across_nodes_continues_its_controller(adapter, tmp_path):
    """verl's resume recipe (docs/integrations/verl.md) on a multi-node session: the state saved
    into the checkpoint at update k is resumed by the next segment on the same allocation, whose
    controller continues (no calibration again); on another allocation (three nodes) the next
    segment starts a fresh search and the trace says why."""
    ckpt = tmp_path / "global_step_14"
    ckpt.mkdir()
    seg1 = str(tmp_path / "seg1.jsonl")
    with multinode.MultiNodeSession(adapter, pools=BOTH, trace=seg1, resume_from=ckpt) as s:
        assert not s.resumed and "no saved state" in s.resume_detail
        for u in range(14):  # the eerl strategy calibrates for 10 governor updates
            one_update(s, u)
        st = s.status()
        assert st["state"] != "calibrating" and st["references"] >= 10, st
        saved = s.save_state(ckpt)
    assert saved == str(ckpt / "eerl-controller.state")

    seg2 = str(tmp_path / "seg2.jsonl")
    with multinode.MultiNodeSession(adapter, pools=BOTH, trace=seg2, resume_from=ckpt) as s:
        assert s.resumed and "resumed from" in s.resume_detail, s.resume_detail
        assert s.status()["references"] == st["references"]
        assert one_update(s, 0)["eerl/state"] != "calibrating"
    rec = [x for x in lines(seg2) if x["type"] == "resume"]
    assert len(rec) == 1 and rec[0]["resumed"] and "on 2 nodes" in rec[0]["tag"], rec
    replay(seg2)

    seg3 = str(tmp_path / "seg3.jsonl")
    three = {k: dict(v, **{"2": [0, 1]}) for k, v in BOTH.items()}
    with multinode.MultiNodeSession(adapter, pools=three, trace=seg3, resume_from=ckpt) as s:
        assert not s.resumed
        assert "allocation changed" in s.resume_detail and "fresh search" in s.resume_detail
        assert one_update(s, 0)["eerl/state"] == "calibrating"
    first = [x for x in lines(seg3) if x["type"] == "update"][0]
    assert any("resume refused" in e["reason"] for e in first["events"]), first["events"]


def test_work_figures_that_are_not_finite_leave_a_trace_eerl_replay_reads(adapter, tmp_path):
    """A framework that reports a NaN or an infinite token count: the update is refused and
    recorded, and the trace stays JSON that `eerl replay` replays to the same decisions."""
    trace = str(tmp_path / "nan.jsonl")
    with multinode.MultiNodeSession(adapter, pools=BOTH, trace=trace) as s:
        for u, (G, N, L) in enumerate([(1000, 900, 100), (math.nan, 900, 100),
                                       (1000, math.inf, 100), (1000, 900, -math.inf),
                                       (1000, 900, 100)]):
            for phase in ("generation", "training"):
                with s.phase(phase):
                    pass
            m = s.update_end(generated_tokens=G, valid_tokens=N, longest_response=L)
            assert m["eerl/accepted"] == (u in (0, 4)), (u, m)

    def strict(x):
        raise ValueError("not JSON: %s" % x)
    ups = [json.loads(x, parse_constant=strict) for x in open(trace)]
    ups = [x for x in ups if x["type"] == "update"]
    assert [x["work"]["G"] for x in ups][1] == "nan" and ups[2]["work"]["N"] == "inf"
    assert "replayed 5 updates" in replay(trace)


def test_a_node_named_two_ways_keeps_every_gpu(adapter, nodes, tmp_path):
    """Node keys 0 and "0" in one pool (records merged from two sources) are one node with the
    GPUs of both: every GPU is leased and metered, none dropped."""
    trace = str(tmp_path / "keys.jsonl")
    pools = {"generation": {0: [0], "0": [1]}, "training": {0: [0], "0": [1]}}
    with multinode.MultiNodeSession(adapter, pools=pools, trace=trace) as s:
        assert [h is not None for h in holders(nodes[0])] == [True, True]
        one_update(s, 0)
    run = [x for x in lines(trace) if x["type"] == "run"][0]
    assert run["node_pools"]["generation"] == {"0": [0, 1]}, run


def test_identical_colocated_pools_in_another_order_are_accepted(adapter, tmp_path):
    pools = {"generation": {1: [1, 0], 0: [0, 1]}, "training": [(0, 1), (1, 0), (0, 0), (1, 1)]}
    with multinode.MultiNodeSession(adapter, pools=pools) as s:
        one_update(s, 0)
    with pytest.raises(ValueError, match="colocated: both pools must be the same GPUs"):
        multinode.MultiNodeSession(adapter, pools={"generation": {0: [0, 1]},
                                                   "training": {0: [1]}})


def test_multinode_writes_no_trace_line(adapter, tmp_path, monkeypatch):
    """Every line of a multi-node trace is the C runtime's: Python opens no file to write while
    a session runs, and the trace still has every line a trace has."""
    trace = str(tmp_path / "c-only.jsonl")
    opened = []
    real_open = builtins.open

    def watch(file, mode="r", *a, **k):
        if any(c in mode for c in "wax+"):
            opened.append((file, mode))
        return real_open(file, mode, *a, **k)
    monkeypatch.setattr(builtins, "open", watch)
    s = multinode.MultiNodeSession(adapter, pools=BOTH, trace=trace)
    try:
        for u in range(3):
            one_update(s, u)
    finally:
        s.close()
        monkeypatch.setattr(builtins, "open", real_open)
    assert opened == [], opened
    types = [x["type"] for x in lines(trace)]
    assert types == ["header", "run", "update", "update", "update", "estimate"], types
    assert os.path.getsize(trace) > 0


def test_every_session_keyword_but_the_single_node_ones_works_across_nodes(adapter, tmp_path):
    """EerlCallback (and verl's entry) pass eerl.Session's keywords to MultiNodeSession on many
    nodes: each is one it takes, but eerld= and meter_interval_ms=, which the integrations
    refuse by name (issue 53: prior=, job_model=, ... used to die with TypeError in train())."""
    from eerl.integrations import _common
    assert set(_common.session_keywords()) - set(_common.multinode_keywords()) == \
        set(_common.SINGLE_NODE_ONLY)
    priors = tmp_path / "priors"
    priors.mkdir()
    trace = str(tmp_path / "t.jsonl")
    with multinode.MultiNodeSession(adapter, pools=BOTH, trace=trace, prior=str(priors),
                                    job_model="tiny-model", governor_peak_mhz=1500,
                                    install_sigterm=False) as s:
        assert not s.prior_taken and str(priors) in s.prior_detail, s.prior_detail
        one_update(s, 0)
    header = lines(trace)[0]
    assert header["governor_peak_mhz"] == 1500, header
