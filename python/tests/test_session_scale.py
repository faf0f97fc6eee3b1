"""eerl.Session over more GPUs than the C configuration's fixed arrays hold (64 per pool): an
80-GPU stand-in node running the paper's Nemotron 16/64 disaggregated split, and the pool sizes
refused with the value named."""

import json

import pytest

from conftest import write_state

import eerl


def test_sixteen_by_sixty_four(tmp_path, monkeypatch):
    # The stand-in in virtual time: its counters move only when the test moves the time, so
    # every GPU's reading is of the same instant however slowly the machine reads 80 of them.
    # The session runs on the same virtual clock (clock=), so its marks read the counters at
    # the boundaries, before the test moves the time on (on real time the meter's thread would
    # read them a little after each mark: docs/meter.md).
    vt = [0]

    def advance(ms):
        vt[0] += ms
        write_state(tmp_path / "nvml.json", n_gpus=80, virtual_time_ms=vt[0])

    state = write_state(tmp_path / "nvml.json", n_gpus=80, virtual_time_ms=0)
    monkeypatch.setenv("EERL_FAKE_NVML_STATE", state)
    pools = {"generation": list(range(16)), "training": list(range(16, 80))}
    trace = str(tmp_path / "run.jsonl")
    with eerl.Session(mode="disaggregated", pools=pools, observe_only=True, trace=trace,
                      clock=lambda: vt[0] / 1000.0) as s:
        for u in range(1, 3):
            with s.phase("generation", pool="generation"):
                advance(500)
            with s.phase("training", pool="training"):
                advance(300)
            m = s.update_end(generated_tokens=1000, valid_tokens=900, longest_response=100,
                             policy_version=u)
            assert m["eerl/update_energy_j"] > 0
    lines = [json.loads(l) for l in open(trace)]
    run = [l for l in lines if l.get("type") == "run"][0]
    assert run["pools"] == pools
    ups = [l for l in lines if l.get("type") == "update"]
    assert len(ups) == 2
    for up in ups:
        # Every GPU reads the same (300 W, the same counter at each instant), so each GPU meters
        # the same energy: the pools hold 16 and 64 GPUs' worth (one GPU left out of the
        # training pool would make it 63/16), adding up to the update's.
        g, t = up["pools"]["generation"]["energy_j"], up["pools"]["training"]["energy_j"]
        assert g > 0
        assert t / g == pytest.approx(4.0, rel=1e-9)
        assert g + t == pytest.approx(up["energy_j"], rel=1e-9)


def test_pool_size_refused_with_the_value(tmp_path, monkeypatch):
    state = write_state(tmp_path / "nvml.json", n_gpus=2)
    monkeypatch.setenv("EERL_FAKE_NVML_STATE", state)
    with pytest.raises(ValueError, match="2000000 GPUs, more than the 1048576"):
        eerl.Session(mode="colocated", pools={"generation": [0] * 2000000})
