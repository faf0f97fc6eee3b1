"""The TRL hook against the TRL/transformers stand-ins: update boundaries from the callback,
phases from ProfilingContext, G/N/L from _generate_and_score_completions, logs, uninstall."""

import json

import pytest

from conftest import RecordingSession

import eerl
from eerl.integrations import trl as eerl_trl
from trl.extras import profiling
from trl.trainer.grpo_trainer import GRPOTrainer
from transformers import TrainingArguments

GENS = [[3, 5, 20, 7], [1, 2, 3, 4], [10, 10, 2, 30]]  # max_completion_length 16 cuts 20 and 30


def test_phases_and_work_per_optimizer_step():
    s = RecordingSession()
    t = GRPOTrainer(GENS, args=TrainingArguments(max_steps=3, gradient_accumulation_steps=2))
    hook = eerl_trl.install(s, t)
    try:
        t.train()
    finally:
        hook.uninstall()
    # training (step begins) | _prepare_inputs: refit, generation, ref log-probs | training
    # (compute_loss, backward) | the second micro-batch's _prepare_inputs (other: reuses the
    # generation) | training (its compute_loss, backward, the optimizer step) | update end
    one = ["training", "refit", "generation", "logprob", "training", "training", "|"]
    assert s.phases() == one * 3
    # N: tokens up to and including EOS of untruncated completions; G: every generated token
    assert s.updates[0] == (3 + 5 + 16 + 7 + 3, 4 + 6 + 8, 16.0, None)
    assert s.updates[1] == (2 + 3 + 4 + 5, 2 + 3 + 4 + 5, 5.0, None)
    assert s.updates[2] == (11 + 11 + 3 + 16, 11 + 11 + 3, 16.0, None)
    assert t.state.log_history[-1]["eerl/observed"] == 3


def test_transformers_generate_path_and_reused_generations():
    s = RecordingSession()
    t = GRPOTrainer(GENS[:2], args=TrainingArguments(max_steps=2, gradient_accumulation_steps=1),
                    use_vllm=False, beta=0.0)
    hook = eerl_trl.install(s, t)
    try:
        t.train()
    finally:
        hook.uninstall()
    assert s.phases() == ["training", "generation", "training", "|"] * 2
    assert [u[1] for u in s.updates] == [18.0, 14.0]


def test_a_step_without_generation_merges_into_the_next_update():
    s = RecordingSession()
    t = GRPOTrainer(GENS, args=TrainingArguments(max_steps=3, gradient_accumulation_steps=1))
    hook = eerl_trl.install(s, t)
    try:
        t.train()
    finally:
        hook.uninstall()
    assert len(s.updates) == 3
    assert hook.generations == 3


def test_uninstall_restores_trl():
    enter, exit_ = profiling.ProfilingContext.__enter__, profiling.ProfilingContext.__exit__
    t = GRPOTrainer(GENS)
    hook = eerl_trl.install(RecordingSession(), t)
    assert profiling.ProfilingContext.__enter__ is not enter
    assert len(t.callbacks) == 1
    hook.uninstall()
    assert profiling.ProfilingContext.__enter__ is enter
    assert profiling.ProfilingContext.__exit__ is exit_
    assert t.callbacks == [] and "_generate_and_score_completions" not in vars(t)


def test_not_a_grpo_trainer_is_refused():
    with pytest.raises(RuntimeError, match="_generate_and_score_completions"):
        eerl_trl.install(RecordingSession(), object())


def test_processes_without_a_session_only_count():
    t = GRPOTrainer(GENS[:1], args=TrainingArguments(max_steps=1))
    hook = eerl_trl.install(None, t)
    try:
        t.train()
    finally:
        hook.uninstall()
    assert hook.generations == 1 and hook.updates == 0


def test_with_a_real_session(node, tmp_path):
    trace = str(tmp_path / "trl.jsonl")
    s = eerl.Session(pools={"generation": [0], "training": [0]}, trace=trace, observe_only=True)
    t = GRPOTrainer(GENS, args=TrainingArguments(max_steps=3, gradient_accumulation_steps=2),
                    stage_s=0.004)
    hook = eerl_trl.install(s, t)
    try:
        t.train()
    finally:
        hook.uninstall()
        s.close()
    ups = [json.loads(l) for l in open(trace) if '"update"' in l]
    assert len(ups) == 3
    assert t.state.log_history[-1]["eerl/accepted"] == 1
