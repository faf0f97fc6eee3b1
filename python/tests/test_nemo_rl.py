"""The NeMo-RL hook against the NeMo-RL stand-in (python/tests/stubs/nemo_rl): phases from the
Timer's DEBUG log lines, N from global_valid_toks, G and L from the rollout metrics, eerl's figures
logged back, quiet logging, async modes, uninstall."""

import io
import json
import logging
import time

import pytest

from conftest import RecordingSession

import eerl
from eerl.integrations import nemo_rl as eerl_nemo
from nemo_rl.algorithms.grpo import grpo_train
from nemo_rl.utils import logger as nemo_logger
from nemo_rl.utils.timer import Timer

STEPS = [([10, 20, 30, 40], 95), ([5, 5, 50, 20], 80), ([8, 8, 8, 8], 32)]


def run(session, steps=STEPS, **kw):
    hook = eerl_nemo.install(session, samples_per_step=4, logger_module=nemo_logger,
                             **kw.pop("install", {}))
    log = nemo_logger.Logger()
    try:
        grpo_train(steps, log, stage_s=kw.pop("stage_s", 0.001), **kw)
    finally:
        hook.uninstall()
    return hook, log


def test_sync_grpo_phases_and_work():
    s = RecordingSession()
    hook, log = run(s)
    # step 1 generates on the initial weights; later steps refit first
    assert s.phases() == ["refit", "generation", "logprob", "logprob", "training", "training", "|",
                          "refit", "generation", "logprob", "logprob", "training", "training", "|",
                          "refit", "generation", "logprob", "logprob", "training", "training", "|"]
    assert s.updates == [(100.0, 95.0, 40.0, 0), (80.0, 80.0, 50.0, 1), (32.0, 32.0, 8.0, 2)]
    eerl_lines = [m for p, _, m in log.logged if "eerl/observed" in m]
    assert [m["eerl/observed"] for m in eerl_lines] == [1, 2, 3]
    assert all(m["eerl/l_from_mean"] == 0 for m in eerl_lines)


def test_without_a_max_length_l_is_the_mean_and_says_so():
    s = RecordingSession()
    with pytest.warns(RuntimeWarning, match="L is the mean"):
        hook, log = run(s, rollout_has_max=False)
    assert [u[2] for u in s.updates] == [25.0, 20.0, 8.0]
    assert all(m["eerl/l_from_mean"] == 1 for p, _, m in log.logged if "eerl/observed" in m)


def test_message_format_parsing():
    s = RecordingSession()
    hook = eerl_nemo.install(s, logger_module=nemo_logger, context={"worker": "driver"})
    try:
        Timer(context={"worker": "collector"}).start("generation")  # another timer: ignored
        t = Timer(context={"worker": "driver"})
        with t.time("generation"):
            pass
        lg = logging.getLogger("nemo_rl.utils.timer")
        lg.debug("policy_training start")  # not the Timer's format: ignored
        lg.debug("[worker=driver hostname=h] policy_training start ts=2026-01-01T00:00:00.000000Z")
        lg.debug("[worker=driver hostname=h] policy_training end elapsed=0.1000s ts=2026-01-01T00:00:00.100000Z")
    finally:
        hook.uninstall()
    assert s.calls == [("begin", "generation"), ("end", "generation"),
                       ("begin", "training"), ("end", "training")]


def test_quiet_keeps_timer_lines_out_of_the_application_log():
    buf = io.StringIO()
    h = logging.StreamHandler(buf)
    root = logging.getLogger()
    root.addHandler(h)
    old = root.level
    root.setLevel(logging.DEBUG)
    try:
        s = RecordingSession()
        run(s, steps=STEPS[:1])
        assert "generation start" not in buf.getvalue()
        assert len(s.updates) == 1
        s = RecordingSession()
        run(s, steps=STEPS[:1], install={"quiet": False})
        assert "generation start" in buf.getvalue()
        assert len(s.updates) == 1
    finally:
        root.removeHandler(h)
        root.setLevel(old)
    lg = logging.getLogger("nemo_rl.utils.timer")
    assert lg.filters == [] and lg.handlers == [] and lg.level == logging.NOTSET


def test_uninstall_restores_the_logger_class():
    orig = nemo_logger.Logger.log_metrics
    hook = eerl_nemo.install(RecordingSession(), logger_module=nemo_logger)
    assert nemo_logger.Logger.log_metrics is not orig
    hook.uninstall()
    assert nemo_logger.Logger.log_metrics is orig


def test_mode_for_reads_the_config():
    cfg = {"grpo": {"async_grpo": {"enabled": False}},
           "policy": {"generation": {"colocated": {"enabled": True}}}}
    assert eerl_nemo.mode_for(cfg) == "colocated"
    cfg["policy"]["generation"]["colocated"]["enabled"] = False
    assert eerl_nemo.mode_for(cfg) == "disaggregated"
    cfg["grpo"]["async_grpo"] = {"enabled": True, "in_flight_weight_updates": False}
    assert eerl_nemo.mode_for(cfg) == "drained"
    cfg["grpo"]["async_grpo"]["in_flight_weight_updates"] = True
    assert eerl_nemo.mode_for(cfg) == "inflight"
    with pytest.raises(ValueError, match="samples_per_step"):
        eerl_nemo.install(RecordingSession(), samples_per_step=0, logger_module=nemo_logger)


def async_driver(log, steps, stage_s=0.001):
    """The training side of async GRPO as the driver's timer shows it."""
    t = Timer(context={"worker": "driver"})
    for i, (lengths, valid) in enumerate(steps):
        log.log_metrics({"mean_gen_tokens_per_sample": sum(lengths) / len(lengths),
                         "max_gen_tokens_per_sample": max(lengths)}, i + 1, prefix="train")
        with t.time("policy_and_reference_logprobs"):
            time.sleep(stage_s)
        with t.time("policy_training"):
            time.sleep(stage_s)
        with t.time("prepare_for_generation/total"):
            time.sleep(stage_s)
        log.log_metrics({"global_valid_toks": valid}, i + 1, prefix="train")


@pytest.mark.parametrize("mode", ["inflight", "drained"])
def test_async_modes_keep_generation_running(mode):
    s = RecordingSession(mode=mode)
    hook = eerl_nemo.install(s, samples_per_step=4, logger_module=nemo_logger)
    try:
        async_driver(nemo_logger.Logger(), STEPS)
    finally:
        hook.uninstall()
    assert len(s.updates) == 3 and all(u[3] is None for u in s.updates)
    if mode == "inflight":  # generation runs on through the weight update
        one = ["logprob", "training", "refit", "|", "generation"]
    else:  # drained: generation stops for the weight update and starts again after it
        one = ["logprob", "training", "refit", "generation", "|", "generation"]
    assert s.phases() == ["generation"] + one * 3
    assert s.open == []  # uninstall ended the last generation phase


def test_with_a_real_session(node, tmp_path):
    trace = str(tmp_path / "nemo.jsonl")
    s = eerl.Session(mode="colocated", pools={"generation": [0], "training": [0]}, trace=trace,
                     observe_only=True)
    try:
        hook, log = run(s, stage_s=0.004)
    finally:
        s.close()
    ups = [json.loads(l) for l in open(trace) if '"update"' in l]
    assert len(ups) == 3
    last = [m for p, _, m in log.logged if "eerl/accepted" in m][-1]
    assert last["eerl/accepted"] == 1 and last["eerl/update_energy_j"] > 0


@pytest.mark.parametrize("mode", ["inflight", "drained"])
def test_async_modes_with_a_real_session(node, mode):
    s = eerl.Session(mode=mode, pools={"generation": [0], "training": [1]})
    hook = eerl_nemo.install(s, samples_per_step=4, logger_module=nemo_logger, strict=True)
    log = nemo_logger.Logger()
    try:
        async_driver(log, STEPS, stage_s=0.004)
    finally:
        hook.uninstall()
        s.close()
    # every observation accepted: no pool's energy is counted in two phases at once
    assert [m["eerl/accepted"] for p, _, m in log.logged if "eerl/accepted" in m] == [1, 1, 1]
