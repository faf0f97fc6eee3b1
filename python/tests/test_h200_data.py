"""The real H200 runs in data/h200/grpo-2026-11-30 and the tools that analyse them: the summary
script's figures against sums computed here from the raw files, the forward test on real traces,
and bad input."""

import gzip
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import EERL_BIN, HANG_S, REPO

DATA = os.path.join(REPO, "data", "h200", "grpo-2026-11-30")
SUMMARY = os.path.join(REPO, "tools", "h200", "rl_summary.py")
# run: the fewest updates it must hold (the issue asks for 60 from a run; colocated-p80,
# colocated-p120 and colocated-p200-* are extra runs with two, three and five times the sequences
# per update, disaggregated a shorter two-GPU one and colocated-once a short one)
RUNS = {"colocated-graph": 60, "colocated-eager": 60, "disaggregated": 30,
        "colocated-aligned": 60, "colocated-packed": 60, "colocated-p80": 50,
        "colocated-once": 30, "colocated-long": 60, "colocated-p80-gc": 60,
        "colocated-p120": 40, "colocated-p200-s0": 28, "colocated-p200-s1": 28,
        "colocated-p200-s2": 27, "colocated-p200-s3": 27, "colocated-p200-s4": 27,
        "colocated-p200-s5": 27, "colocated-p200-s6": 28, "colocated-p200-s7": 28,
        "colocated-p200-s8": 28, "colocated-p200-s9": 28}
P200 = ["colocated-p200-s%d" % k for k in range(10)]


def load(run):
    with open(os.path.join(DATA, run, "trace.jsonl")) as f:
        trace = [json.loads(l) for l in f]
    with open(os.path.join(DATA, run, "log.jsonl")) as f:
        log = {r["update"]: r for r in map(json.loads, f)}
    ups = {t["update"]: t for t in trace if t["type"] == "update"}
    return trace, ups, log


@pytest.mark.parametrize("run", RUNS)
def test_runs_are_long_observe_only_and_consistent(run):
    trace, ups, log = load(run)
    header = trace[0]
    assert header["type"] == "header" and header["clocks_mhz"][0] == 1980
    info = [t for t in trace if t["type"] == "run"][0]
    assert info["observe_only"] is True and info["role"] == "governor"
    assert len(ups) == len(log) >= RUNS[run]
    for k, u in ups.items():
        assert u["setting"]["observed"]["gen_mhz"] == "governor"
        assert (u["work"]["G"], u["work"]["N"], u["work"]["L"]) == \
            (log[k]["G"], log[k]["N"], log[k]["L"])
        assert len(log[k]["ref_energy_mj"]) == (2 if run == "disaggregated" else 1)
    with gzip.open(os.path.join(DATA, run, "samples.csv.gz"), "rt") as f:
        head = f.readline().strip().split(",")
        assert head[:5] == ["mono", "gpu", "power_w", "power_inst_w", "sm_mhz"]
        rows = [line.split(",", 2)[:2] for line in f]
    # the sampler (every 50 ms per GPU) covered every update, at 15 or more samples a second
    gpus = len(log[min(log)]["ref_energy_mj"])
    t0, t1 = min(r["mono"][0] for r in log.values()), max(r["mono"][-1] for r in log.values())
    mono = [float(m) for m, _ in rows]
    assert min(mono) <= t0 and max(mono) >= t1
    assert len(rows) >= 15 * gpus * (t1 - t0)


@pytest.mark.parametrize("run", RUNS)
def test_summary_meter_rows_match_the_raw_files(run):
    r = subprocess.run([sys.executable, SUMMARY, os.path.join(DATA, run)], capture_output=True,
                       text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    _, ups, log = load(run)
    keys = [k for k in ups if k >= 2]
    mine = sum(ups[k]["energy_j"] for k in keys)
    ref = sum(sum(log[k]["ref_energy_mj"]) / 1000.0 for k in keys)
    row = re.search(r"\| whole allocation \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([-+\d.]+)%",
                    r.stdout)
    assert row, r.stdout
    assert int(row.group(1)) == len(keys)
    assert float(row.group(2)) == pytest.approx(mine, abs=0.06)
    assert float(row.group(3)) == pytest.approx(ref, abs=0.06)
    assert float(row.group(4)) == pytest.approx(100 * (mine / ref - 1), abs=0.0006)
    assert abs(mine / ref - 1) < 0.005  # the meter's goal on real counters
    # the per-update columns: how many updates differ by more than 0.5%, and the boundary figures
    full = re.search(r"\| whole allocation \|(?:[^|]*\|){6} (\d+) \| ([\d.]+) \[([\d.]+)\] \| "
                     r"([-\d.]+) \|", r.stdout)
    assert full, r.stdout
    e = [ups[k]["energy_j"] for k in keys]
    rf = [sum(log[k]["ref_energy_mj"]) / 1000.0 for k in keys]
    assert int(full.group(1)) == sum(abs(x / y - 1) > 0.005 for x, y in zip(e, rf))
    acc, run_sum = 0.0, []
    for x, y in zip(e, rf):
        acc += x - y
        run_sum.append(acc)

    def median(v):
        v, h = sorted(v), len(v) // 2
        return v[h] if len(v) % 2 else (v[h - 1] + v[h]) / 2

    med = median(run_sum)
    dev = [abs(v - med) for v in run_sum]
    assert float(full.group(2)) == pytest.approx(median(dev), abs=0.06)
    assert float(full.group(3)) == pytest.approx(max(dev), abs=0.06)
    assert float(full.group(2)) <= float(full.group(3))
    # adjacent updates' differences pull opposite ways; in colocated-p200-s6 hardly (0.02,
    # docs/validation/validation.md)
    assert -1.0 <= float(full.group(4)) < (0.05 if run == "colocated-p200-s6" else 0)
    assert "| generation |" in r.stdout and "sw_power_cap" in r.stdout
    if run == "disaggregated":
        assert "| training (GPU 1) |" in r.stdout


def test_summary_spread_rows_match_the_raw_files():
    run = "colocated-packed"
    r = subprocess.run([sys.executable, SUMMARY, os.path.join(DATA, run), "--from", "5", "--to",
                        "34"], capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    assert "(updates 5-34)" in r.stdout
    _, ups, _ = load(run)
    gen = sorted(ups[k]["phases"]["generation"]["time_s"] for k in range(5, 35))
    med = (gen[14] + gen[15]) / 2
    dev = sorted(abs(x - med) for x in gen)
    row = re.search(r"\| generation time s \| ([\d.]+) \| ([\d.]+) \|", r.stdout)
    assert row, r.stdout
    assert float(row.group(1)) == pytest.approx(med, abs=6e-4)
    assert float(row.group(2)) == pytest.approx((dev[14] + dev[15]) / 2, abs=6e-5)
    assert re.search(r"\| start of generation below 300 W, s \(10th-90th percentile", r.stdout)
    assert "around a line on score_tokens" not in r.stdout  # that run's log predates it


def test_summary_spread_on_the_logged_scoring_work():
    run = "colocated-p120"
    r = subprocess.run([sys.executable, SUMMARY, os.path.join(DATA, run)], capture_output=True,
                       text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    _, ups, log = load(run)
    keys = sorted(k for k in ups if k >= 2)
    sc = [ups[k]["phases"]["logprob"]["time_s"] + ups[k]["phases"]["training"]["time_s"]
          for k in keys]
    for name in ("score_tokens", "padded_tokens"):
        x = [log[k][name] for k in keys]
        mx, my = sum(x) / len(x), sum(sc) / len(sc)
        b = sum((u - mx) * (v - my) for u, v in zip(x, sc)) / sum((u - mx) ** 2 for u in x)
        res = sorted(v - my - b * (u - mx) for u, v in zip(x, sc))
        med = res[len(res) // 2]  # 43 updates: an odd count
        dev = sorted(abs(v - med) for v in res)[len(res) // 2]
        row = re.search(r"\| log-probs \+ training s, around a line on %s \(([\d.e+-]+) s per "
                        r"1e5\) \| ([\d.]+) \| ([\d.]+) \|" % name, r.stdout)
        assert row, r.stdout
        assert float(row.group(1)) == pytest.approx(1e5 * b, rel=2e-3)
        assert float(row.group(3)) == pytest.approx(dev, abs=6e-5)


def test_forward_test_on_real_traces():
    r = subprocess.run([EERL_BIN, "analyze", "--forward-test", "--json",
                        os.path.join(DATA, "colocated-eager", "trace.jsonl")],
                       capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)["pooled"]
    assert p["blocks"] == 17 and p["predictions"] == 51
    # the token work explains part of the variation (docs/validation/validation.md)
    assert p["token_work"]["throughput_median_pct"] < p["constant"]["throughput_median_pct"]


@pytest.mark.parametrize("run,blocks", [("colocated-packed", 29), ("colocated-p80", 13),
                                        ("colocated-p80-gc", 16), ("colocated-p120", 9),
                                        ("colocated-long", 28)])
def test_forward_test_on_the_current_workload(run, blocks):
    r = subprocess.run([EERL_BIN, "analyze", "--forward-test", "--json",
                        os.path.join(DATA, run, "trace.jsonl")],
                       capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)["pooled"]
    assert p["blocks"] == blocks and p["predictions"] == 3 * blocks
    tw, const = p["token_work"], p["constant"]
    # the goal's second half holds here (docs/validation/validation.md); its first (<= 0.6%) does not
    assert tw["throughput_median_pct"] <= 0.5 * const["throughput_median_pct"]
    if run != "colocated-p120":  # there update energy hardly varies: 0.44% against 0.42%
        assert tw["energy_median_pct"] < const["energy_median_pct"]


def test_forward_test_pooled_over_the_p200_runs():
    """The ten 1600-sequence runs (five machines, GPUs 0 and 1) pooled, as docs/validation/validation.md
    reports them: 32 blocks; the goal holds pooled (token-work's median throughput error at most
    0.6% and at most half of the constant's), and its second half in every run."""
    r = subprocess.run([EERL_BIN, "analyze", "--forward-test", "--json"] +
                       [os.path.join(DATA, run, "trace.jsonl") for run in P200],
                       capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    p = out["pooled"]
    assert p["blocks"] == 32 and p["predictions"] == 96
    runs = out["traces"]
    assert [t["blocks"] for t in runs] == [4, 4] + [3] * 8
    assert p["token_work"]["throughput_median_pct"] <= 0.6
    for t in runs + [p]:
        tw, const = t["token_work"], t["constant"]
        assert tw["throughput_median_pct"] <= 0.5 * const["throughput_median_pct"]
        assert tw["energy_median_pct"] < const["energy_median_pct"]


def test_scoring_work_in_the_logs():
    """The runs since c09478c log the scoring work: the scored rows' prompt and response tokens
    (more than N, which counts only response tokens) and the padded positions (more still)."""
    for run in ["colocated-long", "colocated-p80-gc", "colocated-p120"] + P200:
        _, _, log = load(run)
        for r in log.values():
            assert r["N"] < r["score_tokens"] <= r["padded_tokens"]
            assert r["padded_tokens"] % 64 == 0  # GPU rows are rounded up to 64 tokens
        if run != "colocated-long":
            assert all(0 <= r["t_gc"] < 0.05 for r in log.values())


def test_summary_bad_input(tmp_path):
    r = subprocess.run([sys.executable, SUMMARY, str(tmp_path / "nope")], capture_output=True,
                       text=True, timeout=HANG_S)
    assert r.returncode != 0 and "nope" in r.stderr and "trace.jsonl" in r.stderr
    r = subprocess.run([sys.executable, SUMMARY, os.path.join(DATA, "disaggregated"), "--from",
                        "500"], capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode != 0 and "--from 500" in r.stderr
    r = subprocess.run([sys.executable, SUMMARY, os.path.join(DATA, "disaggregated"), "--from",
                        "10", "--to", "5"], capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode != 0 and "--from 10 --to 5" in r.stderr
