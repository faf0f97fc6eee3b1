"""When the work does not explain the time (docs/runtime.md): an eerl.Session whose governor
updates take times the work (G, N, L) does not explain warns once, at the update that calibrated
its controller, with the share, what it means for the controller and the usual cause; the trace
holds the same as its "unexplained" line, which eerl.tracefile reads. A session whose time follows
its work says nothing. The stand-in NVML node runs in virtual time (the test moves it), so the
times are exactly those the test gives."""

import warnings

import pytest

from conftest import write_state

import eerl
from eerl import tracefile


def z(u):
    """A fixed pseudo-random number in [-1, 1] for update u."""
    x = (u * 2654435761) & 0xffffffff
    x ^= x >> 13
    x = (x * 0x5bd1e995) & 0xffffffff
    x ^= x >> 15
    return (x % 20001) / 10000.0 - 1


def run(tmp_path, monkeypatch, noise, updates):
    vt = [0]

    def advance(s):
        vt[0] += int(round(s * 1000))
        write_state(tmp_path / "nvml.json", n_gpus=2, virtual_time_ms=vt[0])

    monkeypatch.setenv("EERL_FAKE_NVML_STATE",
                       write_state(tmp_path / "nvml.json", n_gpus=2, virtual_time_ms=0))
    trace = str(tmp_path / "run.jsonl")
    said = []
    with eerl.Session(mode="colocated", pools={"generation": [0, 1], "training": [0, 1]},
                      observe_only=True, trace=trace, clock=lambda: vt[0] / 1000.0) as s:
        for u in range(1, updates + 1):
            G = 40000 + 2500 * (u % 7)
            with s.phase("generation"):
                advance(4.0 * G / 50000 * (1 + noise * z(u)))
            with s.phase("training"):
                advance(2.0 * 0.9 * G / 45000)
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                s.update_end(generated_tokens=G, valid_tokens=0.9 * G, longest_response=G / 100,
                             policy_version=u)
            said += [(u, str(x.message)) for x in w if issubclass(x.category, RuntimeWarning)]
    return said, tracefile.read(trace)


def test_noise_the_work_does_not_explain_is_said_once(tmp_path, monkeypatch):
    said, t = run(tmp_path, monkeypatch, noise=0.3, updates=30)
    assert len(said) == 1, said
    u, msg = said[0]
    calibrated = [x["update"] for x in t.updates
                  if any(e["kind"] == "calibrated" for e in x.get("events", []))]
    assert calibrated == [u]  # at the update that calibrated the controller
    assert msg.startswith("eerl: the governor predictor leaves ")
    assert "of the update time unexplained" in msg and "transformers' generate" in msg
    line = t.unexplained
    assert line is not None and line["update"] == u and line["message"] in msg
    assert line["share"] > 0.05 and line["trial_updates_needed"] > 12
    assert "%.1f%%" % (100 * line["share"]) in msg
    assert "would need about %d updates" % line["trial_updates_needed"] in msg
    assert not [o for o in t.others if o["type"] == "unexplained"]


def test_time_the_work_explains_is_not_flagged(tmp_path, monkeypatch):
    said, t = run(tmp_path, monkeypatch, noise=0.002, updates=20)
    assert said == []
    assert t.unexplained is None
    assert any(e["kind"] == "calibrated" for x in t.updates for e in x.get("events", []))


def test_the_reader_keeps_the_line(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"type":"header","format":"eerl-trace","version":1}\n'
                 '{"type":"unexplained","update":10,"share":0.2,"message":"m"}\n')
    t = tracefile.read(str(p))
    assert t.unexplained == {"type": "unexplained", "update": 10, "share": 0.2, "message": "m"}
    with pytest.raises(tracefile.TraceError):
        tracefile.read(str(tmp_path / "none.jsonl"))
