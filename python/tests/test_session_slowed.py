"""Updates the GPU slowed by itself (issue 54 item 3), through a Session on the stand-in NVML: a
thermal slowdown during an update's log-prob phase keeps that update from the controller and says why in the
trace; the software power cap during training is recorded as a share of the phase's time and
excludes nothing; a power limit an operator changes mid-run is flagged like a slowdown."""

import json
import time

import pytest

from conftest import needs_runtime, write_state

import eerl

PHASES = ("generation", "logprob", "training", "refit")
HW_THERMAL, SW_POWER_CAP = 0x40, 0x4


def gpu_of(state, i):
    """GPU i of the stand-in's state file as it stands (its UUID kept: eerld names GPUs by it)."""
    with open(state) as f:
        return json.load(f)["gpus"][i]


def run(node, tmp_path, slowed_update, limit_update=None):
    trace = str(tmp_path / "run.jsonl")
    g0 = gpu_of(node, 0)
    g0["power_limit_mw"] = 700000  # this driver says its limit (a real H100's does)
    write_state(node, gpus=[g0, gpu_of(node, 1)])
    s = eerl.Session(mode="colocated", pools={"generation": [0, 1], "training": [0, 1]},
                     observe_only=True, trace=trace, meter_interval_ms=10)
    accepted = []
    for u in range(1, 7):
        for ph in PHASES:
            g0 = dict(g0)
            g0["throttle_reasons"] = ((SW_POWER_CAP if ph == "training" else 0) |
                                      (HW_THERMAL if (u, ph) == (slowed_update, "logprob") else 0))
            # the operator's change lands in the update's log-prob phase
            late = limit_update and (u > limit_update or
                                     (u == limit_update and ph != "generation"))
            g0["power_limit_mw"] = 500000 if late else 700000
            write_state(node, gpus=[g0, gpu_of(node, 1)])
            with s.phase(ph):
                time.sleep(0.08)
        m = s.update_end(generated_tokens=1000, valid_tokens=900, longest_response=50,
                         policy_version=u)
        accepted.append(m["eerl/accepted"])
    s.close()
    with open(trace) as f:
        ups = [json.loads(l) for l in f if '"type":"update"' in l]
    return accepted, ups


@needs_runtime
def test_an_update_the_gpu_slowed_is_not_judged(node, tmp_path):
    accepted, ups = run(node, tmp_path, slowed_update=3)
    assert [u["update"] for u in ups] == [1, 2, 3, 4, 5, 6]
    assert accepted == [1, 1, 0, 1, 1, 1]
    rt = ups[2]["runtime"]
    assert "slowed" in rt["meter_flags"].split(","), rt
    assert rt["excluded"] == "not judged: a GPU slowed itself or its power limit changed (slowed)"
    for u in ups[:2] + ups[3:]:
        assert "excluded" not in u["runtime"] and "slowed" not in u["runtime"]["meter_flags"]
    # the power cap: recorded, training at it all the time, generation never, nothing excluded
    for u in ups:
        cs = u["runtime"]["capped_share"]
        assert cs["training"] == pytest.approx(1.0) and cs["generation"] == 0.0, cs


@needs_runtime
def test_a_power_limit_changed_mid_run_is_flagged(node, tmp_path):
    accepted, ups = run(node, tmp_path, slowed_update=None, limit_update=4)
    flagged = [u["update"] for u in ups if "power_limit" in u["runtime"]["meter_flags"]]
    assert flagged == [4], [(u["update"], u["runtime"]["meter_flags"]) for u in ups]
    assert accepted == [1, 1, 1, 0, 1, 1]


@needs_runtime
def test_through_eerld_too(tmp_path, monkeypatch):
    """A session that reads its GPUs through eerld gets the same reasons and limit (the daemon's
    read carries them)."""
    import eerld_nodes
    n = eerld_nodes.start_nodes(tmp_path / "eerld", 1)[0]
    try:
        monkeypatch.setenv("EERL_SOCKET", n.socket)
        accepted, ups = run(n.state, tmp_path, slowed_update=2, limit_update=5)
    finally:
        n.stop()
    flags = [(u["update"], u["runtime"]["meter_flags"]) for u in ups]
    assert accepted == [1, 0, 1, 1, 0, 1], flags
    assert "slowed" in flags[1][1] and "power_limit" in flags[4][1], flags
