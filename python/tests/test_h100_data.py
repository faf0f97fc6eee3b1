"""data/h100/trl-2026-12-06: an observe-only TRL run on an H100 whose meter read the clock event
reasons and the power limit. The figures its README quotes, checked against its trace."""

import json
import os
import statistics

from conftest import REPO

DIR = os.path.join(REPO, "data", "h100", "trl-2026-12-06")


def lines():
    with open(os.path.join(DIR, "trace.jsonl")) as f:
        return [json.loads(l) for l in f if l.strip()]


def test_no_update_was_slowed_by_the_gpu():
    ups = [l for l in lines() if l["type"] == "update"]
    assert len(ups) == 32
    assert all(u["runtime"]["meter_flags"] == "" for u in ups)
    assert not any("excluded" in u["runtime"] for u in ups)


def test_training_sits_at_the_power_cap():
    ups = [l for l in lines() if l["type"] == "update"]
    share = {ph: [u["runtime"]["capped_share"][ph] for u in ups] for ph in
             ("generation", "logprob", "training")}
    assert statistics.median(share["training"]) == 1.0
    assert round(min(share["training"]), 2) == 0.43
    assert round(statistics.median(share["logprob"]), 2) == 0.33
    assert round(statistics.median(share["generation"]), 2) == 0.07


def test_the_estimate_cannot_judge_and_holds_zero():
    est = [l for l in lines() if l["type"] == "estimate"][-1]
    assert est["judged"] is False and "leaves 26.1% of it unexplained" in est["why"]
    lo, hi = est["saving_ci_pct"]
    assert round(lo, 2) == -1.24 and round(hi, 2) == 1.69 and lo < 0 < hi
