"""data/h100/trl-2026-12-06 and trl-2026-12-06-one-read: observe-only TRL runs on an H100 whose
meter read the clock event reasons and the power limit (the second after the meter read every
part of a tick at once). The figures their READMEs quote, checked against their traces."""

import json
import os
import re
import statistics

import pytest

from conftest import REPO

RUNS = {
    # run: (updates, training's lowest capped share, log-probs' median, generation's median,
    #       unexplained share, saving interval)
    "trl-2026-12-06": (32, 0.43, 0.33, 0.07, "26.1", (-1.24, 1.69)),
    "trl-2026-12-06-one-read": (55, 0.40, 0.33, 0.10, "29.3", (-0.56, 0.73)),
}


def lines(run):
    with open(os.path.join(REPO, "data", "h100", run, "trace.jsonl")) as f:
        return [json.loads(l) for l in f if l.strip()]


def updates(run):
    return [l for l in lines(run) if l["type"] == "update"]


@pytest.mark.parametrize("run", sorted(RUNS))
def test_no_update_was_slowed_by_the_gpu(run):
    ups = updates(run)
    assert len(ups) == RUNS[run][0]
    assert all(u["runtime"]["meter_flags"] == "" for u in ups)
    assert not any("excluded" in u["runtime"] for u in ups)


@pytest.mark.parametrize("run", sorted(RUNS))
def test_training_sits_at_the_power_cap(run):
    _, low, logprob, gen = RUNS[run][:4]
    ups = updates(run)
    share = {ph: [u["runtime"]["capped_share"][ph] for u in ups] for ph in
             ("generation", "logprob", "training")}
    assert statistics.median(share["training"]) == 1.0
    assert round(min(share["training"]), 2) == low
    assert round(statistics.median(share["logprob"]), 2) == logprob
    assert round(statistics.median(share["generation"]), 2) == gen


@pytest.mark.parametrize("run", sorted(RUNS))
def test_the_estimate_cannot_judge_and_holds_zero(run):
    unexplained, (want_lo, want_hi) = RUNS[run][4:]
    est = [l for l in lines(run) if l["type"] == "estimate"][-1]
    assert est["judged"] is False and "leaves %s%% of it unexplained" % unexplained in est["why"]
    lo, hi = est["saving_ci_pct"]
    assert round(lo, 2) == want_lo and round(hi, 2) == want_hi and lo < 0 < hi


def test_the_second_run_read_nvml_itself_and_matches_the_counter():
    """The one-read run: the runtime opened the node's GPUs itself, and its energy is within
    0.10% of the independent counter and 0.07% of Zeus (its summary's totals)."""
    run = "trl-2026-12-06-one-read"
    assert [l for l in lines(run) if l["type"] == "run"][0]["device"] == "nvml"
    with open(os.path.join(REPO, "data", "h100", run, "summary.md")) as f:
        text = f.read()
    for pair, bound in (("eerl vs counter", 0.10), ("eerl vs Zeus", 0.07)):
        m = re.search(r"^\| %s \| 54 \| ([\d.]+) \| ([\d.]+) \|" % pair, text, re.M)
        a, b = float(m.group(1)), float(m.group(2))
        assert abs(a / b - 1) * 100 <= bound + 0.005, (pair, a, b)
    total = sum(u["energy_j"] for u in updates(run) if u["update"] >= 2)
    assert total == pytest.approx(170908.1, abs=0.1)
