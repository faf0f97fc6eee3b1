"""TRL's GRPOTrainer on an H200 with eerl observing and Zeus beside it
(data/h200/trl-2026-12-01): the committed run against what docs/validation/validation.md says of it, the
summary script's figures against sums computed here from the raw files, the forward test on the
trace; and tools/h200/trl_grpo.py itself, end to end on the CPU against the real TRL with the
stand-in NVML node."""

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import EERL_BIN, FAKE_NVML, HANG_S, LIB, PYROOT, REPO, write_state

DATA = os.path.join(REPO, "data", "h200", "trl-2026-12-01", "trl-grpo")
TOOLS = os.path.join(REPO, "tools", "h200")
SUMMARY = os.path.join(TOOLS, "trl_summary.py")


def jsonl(name, where=DATA):
    with open(os.path.join(where, name)) as f:
        return [json.loads(line) for line in f if line.strip()]


def load(where=DATA):
    trace = jsonl("trace.jsonl", where)
    ups = {t["update"]: t for t in trace if t["type"] == "update"}
    log = {r["update"]: r for r in jsonl("log.jsonl", where)}
    return trace, ups, log


def reference(log):
    """{update: J} from consecutive counter readings (the first from its own ref_energy_mj)."""
    out, prev = {}, None
    for k in sorted(log):
        c = log[k]["ref_counter_mj"]
        out[k] = (c - prev) / 1000.0 if prev is not None else log[k]["ref_energy_mj"][0] / 1000.0
        prev = c
    return out


def test_the_run_is_trl_observe_only_and_long_updates():
    trace, ups, log = load()
    info = [t for t in trace if t["type"] == "run"][0]
    assert info["observe_only"] is True and info["framework"] == "trl 1.16.0"
    with open(os.path.join(DATA, "run.json")) as f:
        run = json.load(f)
    assert run["versions"]["trl"] == "1.16.0" and run["versions"]["zeus"] == "0.16.0"
    assert run["params"] > 5e8 and run["sequences_per_update"] == 256 and run["gpu"] is True
    assert sorted(ups) == sorted(log) == list(range(24))
    for k, u in ups.items():
        assert u["setting"]["observed"]["gen_mhz"] == "governor"
        assert set(u["phases"]) == {"generation", "logprob", "training"}
        assert log[k]["zeus"]["sync"] is True
        assert log[k]["zeus"]["phases"]["training"]["n"] == 5  # 4 micro-batches + step begin
        if k >= 1:  # update 0 warms up (97 s); every other one takes 10 s or more
            assert u["time_s"] >= 10.0
    # eerl's update boundaries are continuous, and the log's stamps are eerl's
    for k in range(1, 24):
        assert ups[k]["runtime"]["t_start"] == pytest.approx(ups[k - 1]["runtime"]["t_end"])
        assert log[k]["mono"][1] <= ups[k]["runtime"]["t_end"] <= log[k]["mono"][2]


def test_meter_against_the_counter_and_zeus_on_every_update():
    """docs/validation/validation.md: eerl within 0.14% of the counter on every update from 2 on; Zeus off
    by more than 0.5% only where one counter step (57-64 J) fell between its read and the
    reference's, given back at the next update."""
    _, ups, log = load()
    ref = reference(log)
    worst = max(abs(ups[k]["energy_j"] / ref[k] - 1) for k in range(2, 24))
    assert worst < 0.0014
    flagged = []
    for k in range(2, 24):
        z = log[k]["zeus"]["energy_j"] - ref[k]
        if abs(z) > 0.005 * ref[k]:
            flagged.append(k)
            assert 50 < abs(z) < 70
        else:
            assert abs(z) < 0.01  # otherwise Zeus and pynvml read the same counter value
    assert flagged == [8, 9, 19, 20, 23]
    for k in (8, 19):
        assert log[k]["zeus"]["energy_j"] - ref[k] == pytest.approx(
            ref[k + 1] - log[k + 1]["zeus"]["energy_j"], abs=0.01)


def summary(*args):
    r = subprocess.run([sys.executable, SUMMARY, DATA] + list(args), capture_output=True,
                       text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_summary_figures_match_the_raw_files():
    out = summary()
    _, ups, log = load()
    ref = reference(log)
    keys = range(2, 24)
    row = re.search(r"\| eerl vs counter \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([-+\d.]+)%", out)
    assert row, out
    assert int(row.group(1)) == 22
    assert float(row.group(2)) == pytest.approx(sum(ups[k]["energy_j"] for k in keys), abs=0.06)
    assert float(row.group(3)) == pytest.approx(sum(ref[k] for k in keys), abs=0.06)
    row = re.search(r"\| eerl vs Zeus \| 22 \| [\d.]+ \| ([\d.]+) \|.*\| (\d+) \| [-\d.]+ \|", out)
    assert float(row.group(1)) == pytest.approx(
        sum(log[k]["zeus"]["energy_j"] for k in keys), abs=0.06)
    assert int(row.group(2)) == 5
    # eerl's overhead: its session calls and hook on the training thread over the update time
    share = sum(log[k]["cost"]["eerl_session"][0] + log[k]["cost"]["eerl_hook"][0]
                for k in keys) / sum(ups[k]["time_s"] for k in keys)
    m = re.search(r"\*\*eerl in all \(session \+ hook\)\*\* \| \| [\d.]+ \| [\d.]+ \| "
                  r"\*\*([\d.]+)%\*\*", out)
    assert float(m.group(1)) == pytest.approx(100 * share, abs=0.0006)
    assert 0.004 < share < 0.006  # 0.52%: just over the 0.5% (docs/validation/validation.md)
    # generation's spread, and the host stalls it follows
    assert "correlation with G -0.11" in out and "correlation with generation time 0.91" in out


def test_summary_plot_and_bad_input(tmp_path):
    summary("--plot", str(tmp_path / "p.png"), "--json", str(tmp_path / "s.json"))
    assert os.path.getsize(tmp_path / "p.png") > 10000
    with open(tmp_path / "s.json") as f:
        figs = json.load(f)
    assert figs["meter"]["eerl vs counter"]["over"] == 0
    r = subprocess.run([sys.executable, SUMMARY, str(tmp_path / "nope")], capture_output=True,
                       text=True, timeout=HANG_S)
    assert r.returncode != 0 and "nope" in r.stderr
    r = subprocess.run([sys.executable, SUMMARY, DATA, "--from", "500"], capture_output=True,
                       text=True, timeout=HANG_S)
    assert r.returncode != 0 and "500" in r.stderr


def forward_test(where):
    """eerl analyze --forward-test --json on a run's trace: the pooled figures."""
    r = subprocess.run([EERL_BIN, "analyze", "--forward-test", "--json",
                        os.path.join(where, "trace.jsonl")], capture_output=True, text=True,
                       timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["pooled"]


def test_forward_test_on_the_trl_trace():
    """Both predictors miss on this run (docs/validation/validation.md): generation, 74% of the update,
    varies 10.5-15.0 s for the same 1024 decode steps with the host's stalls, not the work."""
    p = forward_test(DATA)
    assert p["blocks"] == 2 and p["predictions"] == 6
    assert p["token_work"]["throughput_median_pct"] == pytest.approx(10.25, abs=0.01)
    assert p["constant"]["throughput_median_pct"] == pytest.approx(9.00, abs=0.01)


def test_the_script_end_to_end_on_the_cpu(tmp_path):
    """tools/h200/trl_run.sh (as the device call runs it, with eerl built by the caller) and
    tools/h200/trl_grpo.py with the real TRL: a tiny model, three updates, eerl on the stand-in
    NVML node, the pynvml reference reading the same stand-in (pynvml finds it through
    LD_LIBRARY_PATH), Zeus where it is installed (else the script says it is unavailable); then
    the analysis and the phase-mark benchmark (bench_meter --marks --real, here on the stand-in
    library, where it is built)."""
    import tarfile
    node = write_state(tmp_path / "nvml.json", n_gpus=1)
    bench = os.path.join(os.path.dirname(LIB), "bench", "bench_meter")
    env = dict(os.environ, EERL_FAKE_NVML_STATE=node, HF_HUB_OFFLINE="1",
               LD_LIBRARY_PATH=os.path.dirname(FAKE_NVML), PYTHONPATH=PYROOT,
               TRL_PYTHON=sys.executable, RL_BUILT="1", EERL_LIBRARY=LIB, EERL_BIN=EERL_BIN,
               TRL_SAMPLER="0", TRL_WHEELS="0", TRL_BENCH_UPDATES="1")
    if os.access(bench, os.X_OK):
        env["BENCH_METER"] = bench
    dest = tmp_path / "dest"
    r = subprocess.run(["bash", os.path.join(TOOLS, "trl_run.sh"), str(dest), "900",
                        "--size", "tiny", "--updates", "3", "--prompts", "4", "--generations",
                        "4", "--micro-batch", "8", "--lengths", "4:12:4", "--min-prompt", "6",
                        "--max-prompt", "6"], capture_output=True, text=True, env=env,
                       timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "trl_grpo.py exit 0, 3 updates" in r.stdout
    with tarfile.open(dest / "trl-grpo.tar.gz") as t:
        t.extractall(tmp_path)
    out = tmp_path / "trl-grpo"
    with open(out / "stdout.txt") as f:
        stdout = f.read()
    with open(out / "run.json") as f:
        limits = json.load(f)["completion_limits"]
    # --lengths: one limit per update, the first at HI, each from LO..HI in steps of 4
    has_zeus = importlib.util.find_spec("zeus") is not None and \
        importlib.util.find_spec("sklearn") is not None
    if not has_zeus:
        assert "Zeus is unavailable" in stdout
    with open(dest / "bench-meter-marks.txt") as f:
        marks = f.read()
    if "BENCH_METER" in env:  # the mark benchmark's lines, printed at the end of the call too
        assert re.search(r"^1 GPU  thread   mark: median +[0-9.]+ ", marks, re.M), marks
        assert re.search(r"^1 GPU  caller   mark: median +[0-9.]+ ", marks, re.M), marks
        assert "1 GPU  thread   mark:" in r.stdout
    else:
        assert "no bench_meter" in marks
    assert "eerl's own timing of its calls" in r.stdout
    trace, ups, log = load(str(out))
    assert sorted(ups) == sorted(log) == [1, 2, 3]  # numbered from 1, in the trace and the log
    assert len(limits) == 3 and limits[0] == 12 and set(limits) <= {4, 8, 12}, limits
    for k, lim in enumerate(limits, 1):  # TRL generated within each update's limit
        assert 1 <= ups[k]["work"]["L"] <= lim, (k, ups[k]["work"], lim)
    with open(out / "costs.json") as f:
        costs = json.load(f)
    assert costs["updates"] == 3 and ("zeus" in costs["unavailable"]) == (not has_zeus)
    assert "reference" not in costs["unavailable"]
    ref = reference(log)
    watts = 300.0  # the stand-in GPU's constant draw (conftest.gpu)
    for k in (2, 3):  # each with the update before it (numbered from 1)
        assert set(ups[k]["phases"]) == {"generation", "logprob", "training"}
        assert log[k]["cost"]["eerl_session"][2] > 0
        # eerl's own timing of its calls: every session call of the update, inside the
        # script's own measure of them (which adds the script's wrappers' Python)
        ov = log[k]["eerl_overhead"]
        assert ov["calls"] >= log[k]["cost"]["eerl_session"][2] - 1 and ov["s"] > 0
        assert ov["pct"] == pytest.approx(100 * ov["s"] / ups[k]["time_s"])
        # at constant power each reader's energy is the power times its own window: eerl's
        # between its marks, the reference's between its two reads (each between the stamps
        # mono[2] and mono[3]), Zeus's between its own time stamps (its Measurement.time)
        # (each read lies between two stamps of the log, so these bounds hold however slow
        # the machine; 1 J for the stand-in counter's 1 ms steps)
        m, mp = log[k]["mono"], log[k - 1]["mono"]
        slack = (m[2] - m[1]) + (mp[2] - mp[1])  # eerl's marks lie inside update_end
        assert abs(ups[k]["energy_j"] - watts * ups[k]["time_s"]) <= watts * slack + 1.0
        assert watts * (m[2] - mp[3]) - 1.0 <= ref[k] <= watts * (m[3] - mp[2]) + 1.0
        if has_zeus:
            z = log[k]["zeus"]
            b = z["begin"]  # Zeus's start read; its end read lies between mono[3] and mono[4]
            assert watts * (m[3] - b[1]) - 1.0 <= z["energy_j"] <= watts * (m[4] - b[0]) + 1.0
        # the bracketing reference: a read right before eerl's update mark and one right after;
        # eerl's update energy lies between what they allow (1 J: the stand-in's counter step)
        assert log[k]["ref_before_mj"] <= log[k]["ref_counter_mj"]
        lo = (log[k]["ref_before_mj"] - log[k - 1]["ref_counter_mj"]) / 1000.0
        hi = (log[k]["ref_counter_mj"] - log[k - 1]["ref_before_mj"]) / 1000.0
        assert lo - 1.0 <= ups[k]["energy_j"] <= hi + 1.0, (lo, ups[k]["energy_j"], hi)
    r = subprocess.run([sys.executable, SUMMARY, str(out), "--from", "2", "--json",
                        str(tmp_path / "s.json")], capture_output=True, text=True,
                       timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    assert "| eerl vs counter | 2 |" in r.stdout
    assert "eerl against the bracketing reference" in r.stdout
    with open(tmp_path / "s.json") as f:
        b = json.load(f)["bracket"]
    # The loop above holds eerl's update energy within the bracket to the stand-in's 1 J counter
    # step. The summary's "within 0.5%" is a figure for the H200 runs, whose updates draw tens of
    # kilojoules; these CPU updates draw about 8 J, under ten counter steps, and eerl reads
    # between steps by integrating power over times a loaded machine stretches (one update once
    # read 1.02% outside): the figure is read here, not required.
    assert b["n"] == 2, b


# ---- the second run (data/h200/trl-2026-12-01-lengths): limits varied, marks off the loop ----

DATA2 = os.path.join(REPO, "data", "h200", "trl-2026-12-01-lengths", "trl-grpo")


def test_second_run_limits_updates_and_overhead():
    """docs/validation/validation.md: 35 updates, each within its drawn completion limit; eerl's own timing
    of its calls under 0.1% of every update's time on average (0.092%), worst 0.264%."""
    _, ups, log = load(DATA2)
    with open(os.path.join(DATA2, "run.json")) as f:
        limits = json.load(f)["completion_limits"]
    assert sorted(ups) == sorted(log) == list(range(1, 36)) and len(limits) == 35
    assert limits[0] == 768 and set(limits) <= {512, 576, 640, 704, 768}
    for k in ups:
        assert ups[k]["work"]["L"] <= limits[k - 1]
    assert len({ups[k]["work"]["L"] for k in ups}) == 5  # the work varies
    ov = [log[k]["eerl_overhead"] for k in range(2, 36)]
    share = sum(o["s"] for o in ov) / sum(ups[k]["time_s"] for k in range(2, 36))
    assert share == pytest.approx(0.00092, abs=0.00001)
    assert max(o["pct"] for o in ov) == pytest.approx(0.264, abs=0.001)


def test_second_run_meter_misses_are_single_counter_steps():
    """docs/validation/validation.md: eerl within 0.5% of the counter on 30 of 34 updates; the other four,
    7/8 and 19/20, are each one counter step (power x 0.1 s) that the next update gives back."""
    _, ups, log = load(DATA2)
    ref = reference(log)
    diff = {k: ups[k]["energy_j"] - ref[k] for k in range(2, 36)}
    off = [k for k in diff if abs(diff[k]) > 0.005 * ref[k]]
    assert off == [7, 8, 19, 20]
    for k in (7, 19):
        assert 50 < abs(diff[k]) < 70 and 50 < abs(diff[k + 1]) < 70
        assert diff[k] * diff[k + 1] < 0 and abs(diff[k] + diff[k + 1]) < 12
    total = sum(ups[k]["energy_j"] for k in diff) / sum(ref[k] for k in diff) - 1
    assert total == pytest.approx(0.000094, abs=0.000002)


def test_second_run_forward_test():
    """docs/validation/validation.md: with work that varies token-work predicts energy ten times better than
    the constant reference; throughput errs by the host-bound decode's jitter in both."""
    p = forward_test(DATA2)
    assert p["blocks"] == 6 and p["predictions"] == 18
    assert p["token_work"]["throughput_median_pct"] == pytest.approx(8.10, abs=0.01)
    assert p["constant"]["throughput_median_pct"] == pytest.approx(9.97, abs=0.01)
    assert p["token_work"]["energy_median_pct"] == pytest.approx(1.55, abs=0.01)
    assert p["constant"]["energy_median_pct"] == pytest.approx(14.82, abs=0.01)


# ---- the third run (data/h200/trl-2026-12-01-bracket): a read before and after each mark ----

DATA3 = os.path.join(REPO, "data", "h200", "trl-2026-12-01-bracket", "trl-grpo")


def test_third_run_meter_within_the_bracket_on_every_update():
    """docs/validation/validation.md: every update of eerl within 0.5% of the interval that the counter
    reads right before and right after its marks allow; one value on 29 of 37 updates."""
    _, ups, log = load(DATA3)
    assert sorted(ups) == list(range(1, 39))
    exact, worst = 0, 0.0
    for k in range(2, 39):
        b, a = log[k]["ref_before_mj"], log[k]["ref_counter_mj"]
        pb, pa = log[k - 1]["ref_before_mj"], log[k - 1]["ref_counter_mj"]
        assert b <= a and pb <= pa
        lo, hi = (b - pa) / 1000.0, (a - pb) / 1000.0
        e = ups[k]["energy_j"]
        worst = max(worst, max(lo - e, e - hi, 0.0) / ((lo + hi) / 2))
        exact += hi - lo < 1e-9
    assert worst == pytest.approx(0.00489, abs=0.00001) and exact == 29
    r = subprocess.run([sys.executable, SUMMARY, DATA3], capture_output=True, text=True,
                       timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    assert "within 0.5% of the interval the readings allow on **37**, worst 0.489%" in r.stdout
