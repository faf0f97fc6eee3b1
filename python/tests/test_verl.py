"""The verl hook against the verl stand-in (python/tests/stubs/verl): phases from marked_timer,
G/N/L from the batch's response_mask, policy versions, metrics in verl's log, uninstall, errors."""

import json
import warnings

import pytest

from conftest import RecordingSession

import eerl
from eerl.integrations import verl as eerl_verl
from verl.trainer.ppo import ray_trainer
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, response_mask


def batches():
    return [response_mask([5, 9, 3, 7]), response_mask([12, 2, 2, 2]), response_mask([1, 1, 4, 8])]


def test_phases_work_and_versions():
    s = RecordingSession()
    hook = eerl_verl.install(s)
    try:
        t = RayPPOTrainer(batches(), stage_s=0.001)
        t.fit()
    finally:
        hook.uninstall()
    one = ["generation", "logprob", "logprob", "training", "refit", "|"]
    assert s.phases() == one * 3
    # G = N = masked response tokens, L = the longest response; version = refits before gen
    assert s.updates == [(24.0, 24.0, 9.0, 0), (18.0, 18.0, 12.0, 1), (14.0, 14.0, 8.0, 2)]
    # "old_log_prob" and "ref" are one logprob phase each (ended and begun again)
    assert sum(1 for c in s.calls if c == ("begin", "logprob")) == 6
    # eerl's figures are in what verl logs
    assert t.logged[0][0]["eerl/observed"] == 1 and "response_length/mean" in t.logged[0][0]
    assert "eerl/state" not in t.logged[0][0]  # text is left out of numeric logs


def test_uninstall_restores_verl():
    orig_timer, orig_metrics = ray_trainer.marked_timer, ray_trainer.compute_data_metrics
    hook = eerl_verl.install(RecordingSession())
    assert ray_trainer.marked_timer is not orig_timer
    hook.uninstall()
    assert ray_trainer.marked_timer is orig_timer
    assert ray_trainer.compute_data_metrics is orig_metrics


def test_phase_map_overrides():
    s = RecordingSession()
    hook = eerl_verl.install(s, phases={"ref": None, "reward": "other"})
    try:
        RayPPOTrainer(batches()[:1], stage_s=0.001).fit()
    finally:
        hook.uninstall()
    assert s.phases() == ["generation", "other", "logprob", "training", "refit", "|"]


def test_eerl_errors_warn_once_or_stop_the_run_when_strict():
    class Failing(RecordingSession):
        def phase_begin(self, name, pool=None):
            if name == "refit":
                raise eerl.EerlError(-5, "beginning phase refit", "no permission")
            super().phase_begin(name, pool)

    s = Failing()
    hook = eerl_verl.install(s)
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            RayPPOTrainer(batches(), stage_s=0.001).fit()
    finally:
        hook.uninstall()
    assert len(s.updates) == 3  # the run went on
    msgs = [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)]
    assert any("no permission" in m for m in msgs)
    assert hook.driver.errors >= 3
    hook = eerl_verl.install(Failing(), strict=True)
    try:
        with pytest.raises(eerl.EerlError, match="no permission"):
            RayPPOTrainer(batches(), stage_s=0.001).fit()
    finally:
        hook.uninstall()


def test_an_unknown_verl_is_refused():
    import types
    with pytest.raises(RuntimeError, match="no marked_timer"):
        eerl_verl.install(RecordingSession(), module=types.ModuleType("ray_trainer"))


def test_with_a_real_session(node, tmp_path):
    trace = str(tmp_path / "verl.jsonl")
    s = eerl.Session(mode="colocated", pools={"generation": [0, 1], "training": [0, 1]},
                     trace=trace, observe_only=True)
    hook = eerl_verl.install(s)
    try:
        t = RayPPOTrainer(batches(), stage_s=0.004)
        t.fit()
    finally:
        hook.uninstall()
        s.close()
    ups = [json.loads(l) for l in open(trace) if '"update"' in l]
    assert len(ups) == 3
    assert t.logged[-1][0]["eerl/accepted"] == 1
    assert t.logged[-1][0]["eerl/update_energy_j"] > 0


def test_disaggregated_with_a_real_session(node):
    s = eerl.Session(mode="disaggregated", pools={"generation": [0], "training": [1]})
    hook = eerl_verl.install(s, strict=True)
    try:
        t = RayPPOTrainer(batches() * 2, stage_s=0.003)
        t.fit()
    finally:
        hook.uninstall()
        s.close()
    assert [m["eerl/accepted"] for m, _, _ in t.logged] == [1] * 6
