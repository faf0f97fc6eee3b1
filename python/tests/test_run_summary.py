"""What eerl did on the run, as a user sees it (docs/what-eerl-did.md): the figures metrics() gives
the loggers (per phase, the run's energy, the running estimate), and the summary close() returns
with its one line. The stand-in NVML node runs in virtual time (the test moves it), so the times
are exactly those the test gives."""

import math

import pytest

from conftest import gpu, write_state

import eerl
from eerl import _types, summary, tracefile

POOLS = {"generation": [0, 1], "training": [0, 1]}


def run(tmp_path, monkeypatch, updates, observe_only=True, numbers=None, slowed=()):
    """updates virtual-time updates whose time follows their work; numbers: the update numbers
    given to update_end (None: counted from 1); slowed: the updates during which the GPUs
    report a hardware slowdown. Returns (the metrics of each update, the summary, the trace)."""
    vt = [0]
    reasons = [0]
    state = tmp_path / "nvml.json"

    def put():
        write_state(state, virtual_time_ms=vt[0],
                    gpus=[dict(gpu(i), throttle_reasons=reasons[0]) for i in range(2)])

    def advance(s):
        vt[0] += int(round(s * 1000))
        put()

    put()
    monkeypatch.setenv("EERL_FAKE_NVML_STATE", str(state))
    trace = str(tmp_path / "run.jsonl")
    ms = []
    s = eerl.Session(mode="colocated", pools=POOLS, observe_only=observe_only, trace=trace,
                     clock=lambda: vt[0] / 1000.0, install_sigterm=False)
    for i in range(updates):
        u = numbers[i] if numbers else i + 1
        reasons[0] = 0x8 if u in slowed else 0  # nvmlClocksEventReasonHwSlowdown
        put()
        G = 40000 + 2500 * (u % 7)
        with s.phase("generation"):
            advance(4.0 * G / 50000)
        with s.phase("training"):
            advance(2.0 * 0.9 * G / 45000)
        ms.append(s.update_end(generated_tokens=G, valid_tokens=0.9 * G,
                               longest_response=G / 100, policy_version=u, update=u).metrics)
    out = s.close()
    assert s.close() is out and s.summary is out  # idempotent, kept
    return ms, out, tracefile.read(trace)


def test_metrics_give_each_phase_the_run_energy_and_the_estimate(tmp_path, monkeypatch):
    ms, out, t = run(tmp_path, monkeypatch, 24)
    total = 0.0
    for m, line in zip(ms, t.updates):
        total += line["energy_j"]
        assert m["eerl/energy_total_j"] == pytest.approx(total, rel=1e-9)
        for phase in ("generation", "training"):
            e, sec = m["eerl/%s_energy_j" % phase], m["eerl/%s_time_s" % phase]
            assert sec > 0 and m["eerl/%s_power_w" % phase] == pytest.approx(e / sec)
        assert "eerl/refit_time_s" not in m  # a phase the update did not run
        assert m["eerl/state_code"] == _types.STATES.index(m["eerl/state"])
        assert all(not (isinstance(v, float) and math.isnan(v))
                   for k, v in m.items() if k.startswith(("eerl/saving", "eerl/throughput")))
    last = ms[-1]
    assert last["eerl/estimate_judged"] == 1
    assert last["eerl/saving_lo_pct"] <= last["eerl/saving_pct"] <= last["eerl/saving_hi_pct"]
    assert last["eerl/saving_pct"] == pytest.approx(t.estimate["saving_pct"], abs=0.006)
    assert last["eerl/throughput_change_lo_pct"] <= last["eerl/throughput_change_hi_pct"]


def test_the_self_check_says_it_holds_zero(tmp_path, monkeypatch):
    ms, out, t = run(tmp_path, monkeypatch, 24)
    e = out.estimate
    assert e.judged and e.updates == 23 and out.updates == 24 and out.not_judged == 1
    assert e.saving_pct == pytest.approx(t.estimate["saving_pct"], abs=0.006)
    assert out.energy_j == pytest.approx(sum(u["energy_j"] for u in t.updates))
    assert out.allowance_kept is None and out.observe_only
    assert out.line.startswith("eerl: observe-only self-check: ")
    assert "estimated saving %.1f%% [%.1f, %.1f] (90%%), holds 0 as it should" % tuple(
        round(x, 1) + 0.0 for x in (e.saving_pct, *e.saving_ci_pct)) in out.line, out.line
    assert "-0.0" not in out.line
    assert out.line.endswith("1 of 24 updates not judged (1 warm-up)"), out.line
    assert "%s used over 24 updates" % summary.energy_text(out.energy_j) in out.line


def test_updates_slowed_by_the_gpu_and_missing_ones_are_counted(tmp_path, monkeypatch):
    numbers = list(range(1, 11)) + list(range(13, 25))  # 11 and 12 never ended
    ms, out, t = run(tmp_path, monkeypatch, len(numbers), numbers=numbers, slowed=(15, 16))
    flagged = [u["update"] for u in t.updates
               if "slowed" in u.get("runtime", {}).get("meter_flags", [])]
    # the update after a slowed one shares its boundary's sample, which read the slowdown
    assert {15, 16} <= set(flagged) and out.slowed == len(flagged)
    assert out.updates == 24 and out.gaps == 2
    assert out.not_judged == 24 - out.estimate.updates
    assert "of 24 updates not judged (1 warm-up, %d slowed by the GPU, 2 missing" % len(flagged) in out.line


def test_a_controlled_run_says_whether_the_allowance_was_kept(tmp_path, monkeypatch):
    ms, out, t = run(tmp_path, monkeypatch, 24, observe_only=False)
    assert out.line.startswith("eerl: ") and "self-check" not in out.line
    e = out.estimate
    if e.judged:
        assert out.allowance_kept == (e.throughput_change_pct >= -2.0)
        assert ("allowance 2% " + ("kept" if out.allowance_kept else "exceeded")) in out.line
        assert "throughput %+.1f%% [%+.1f, %+.1f]" % tuple(
            round(x, 1) + 0.0 for x in (e.throughput_change_pct, *e.throughput_ci_pct)) in out.line


def test_a_session_closed_before_any_update_says_so(tmp_path, monkeypatch):
    ms, out, t = run(tmp_path, monkeypatch, 0)
    assert out.updates == 0 and out.line == "eerl: observe-only self-check: no update ended: " \
        "nothing measured"


def test_the_line_of_an_estimate_that_cannot_be_judged_says_why():
    e = eerl.api.Estimate(5, 0, 5, 1, 1e3, 1e3, 0.0, (0.0, 0.0), 10.0, 10.0, 0.0, (0.0, 0.0),
                          0.0, (0.0, 0.0), False, "no update after the controller's "
                          "calibration yet")
    out = summary.run_summary(7.2e6, 6, 0, 0, 1, 0.02, False, e)
    assert out.line == ("eerl: 2.0 kWh used over 6 updates; estimated saving not judged: no "
                        "update after the controller's calibration yet; 1 of 6 updates not "
                        "judged (1 warm-up)")
    assert out.allowance_kept is None


def test_a_trace_gives_the_line_its_session_printed(tmp_path, monkeypatch):
    numbers = list(range(1, 11)) + list(range(13, 25))
    ms, out, t = run(tmp_path, monkeypatch, len(numbers), numbers=numbers, slowed=(15, 16))
    again = summary.from_trace(t)
    assert again.line == out.line
    assert (again.updates, again.gaps, again.slowed) == (out.updates, out.gaps, out.slowed)


def test_an_allowance_the_run_does_not_state_is_not_judged():
    """A judged estimate with no allowance known (a trace whose header does not say it): the
    line says nothing of an allowance rather than assume the default."""
    e = eerl.api.Estimate(
        updates=5, judged_updates=5, calibration_updates=5, not_counted=1, energy_j=1e3,
        predicted_governor_energy_j=1.1e3, saved_j=100.0, saved_ci_j=(90.0, 110.0), time_s=10.0,
        predicted_governor_time_s=9.9, saving_pct=9.0, saving_ci_pct=(8.0, 10.0),
        throughput_change_pct=-1.0, throughput_ci_pct=(-1.5, -0.5), judged=True, why="")
    out = summary.run_summary(7.2e6, 6, 0, 0, 1, None, False, e)
    assert out.allowance_kept is None and "allowance" not in out.line
    assert summary.run_summary(7.2e6, 6, 0, 0, 1, 0.02, False, e).allowance_kept is True
