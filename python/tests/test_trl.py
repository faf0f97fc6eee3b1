"""eerl.integrations.trl against the real TRL (the release pinned in python/requirements/test.in):
GRPOTrainer runs for a few optimizer steps on the CPU with a tiny randomly initialised Llama built
from a config and a word-level tokenizer built here (nothing is downloaded), hooked as
docs/integrations/trl.md tells a user: the one line (EerlCallback) and the explicit install().
What TRL did is recorded beside eerl (its profiling blocks, its generation tensors), and eerl's
phases, G/N/L and trace are checked against it.

TRL's vLLM paths (colocate, server, AsyncGRPOTrainer) run against the real vLLM in
test_trl_vllm.py, in a virtual environment of their own."""

import json
import os
import subprocess
import sys
import warnings

import pytest

from conftest import child_env, HANG_S, HERE, RecordingSession

import eerl
from eerl.integrations import trl as eerl_trl
from eerl.integrations import IntegrationError

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")
transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")

from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.extras import profiling  # noqa: E402
from trl.trainer import grpo_trainer as grpo_module  # noqa: E402

sys.path.insert(0, HERE)
import trl_tiny  # noqa: E402


def test_the_real_packages_are_imported():
    # stubs/ is first on sys.path (conftest): TRL and transformers must come from the venv.
    for m in (trl, transformers, profiling):
        assert "site-packages" in m.__file__, m.__file__
    assert trl.__version__ == eerl_trl.TESTED


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return trl_tiny.build_model(str(tmp_path_factory.mktemp("tiny")))


def per_update(calls):
    out, cur = [], []
    for c in calls:
        if c == "|":
            out.append(cur)
            cur = []
        else:
            cur.append(c)
    assert cur == [], "phases after the last update end: %s" % cur
    return out


def train_hooked(trainer, session=None, **install):
    """trainer.train() with eerl's hook installed on session (a new RecordingSession if None) and
    uninstalled after, whatever happened; returns (session, hook)."""
    session = RecordingSession() if session is None else session
    hook = eerl_trl.install(session, trainer, **install)
    try:
        trainer.train()
    finally:
        hook.uninstall()
    return session, hook


def test_grpo_trainer_phases_work_eval_and_trace(model_dir, node, tmp_path, monkeypatch):
    # 3 optimizer steps of 2 micro-batches, a reference model (beta > 0), evaluation every 2 steps.
    trainer = trl_tiny.trainer(model_dir, str(tmp_path / "out"), max_steps=3, eval_steps=2)
    rec = trl_tiny.Record(trainer, monkeypatch)
    # The lines docs/integrations/trl.md gives (one process: it is the main one).
    trace = str(tmp_path / "eerl-run.jsonl")
    session = None
    if trainer.accelerator.is_main_process:
        session = eerl.Session(mode="colocated", pools={"generation": [0], "training": [0]},
                               trace=trace, observe_only=True)
    spy = trl_tiny.Spy(session)
    hook = eerl_trl.install(spy, trainer)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no eerl warning in a good run
            trainer.train()
    finally:
        hook.uninstall()
        session.close()

    phases = per_update(spy.calls)
    print("phases per update:", phases)
    assert len(phases) == 3 == trainer.state.global_step == len(rec.steps)
    # What TRL did in each step: the train-mode blocks eerl maps, at the top of each
    # _prepare_inputs (the first micro-batch generates and scores; the second reuses it).
    for step, got in zip(rec.steps, phases):
        want = ["training"]
        for blocks in step:
            want += [eerl_trl.PHASES[b] for b in blocks] + ["training"]
        assert got == want
    assert phases[0] == ["training", "generation", "logprob", "training", "training"]
    # Evaluation ran (after step 2) and generated in eval mode; it is in no update's work.
    assert rec.eval_generate_blocks >= 1 and hook.eval_generations >= 1
    assert hook.generations == 3 == len(rec.gens)
    # G/N/L from TRL's own tensors of each train-mode generation.
    for w, g in zip(spy.work, rec.gens):
        assert (w["generated_tokens"], w["valid_tokens"], w["longest_response"]) == (
            g["G"], g["N"], g["L"])
    # One trace line per update, with that work and time in the phases eerl marked.
    ups = [json.loads(l) for l in open(trace) if '"type":"update"' in l.replace(" ", "")]
    assert len(ups) == 3
    for u, g, ph in zip(ups, rec.gens, phases):
        assert (u["work"]["G"], u["work"]["N"], u["work"]["L"]) == (g["G"], g["N"], g["L"])
        marked = {p for p, v in u["phases"].items() if p != "other" and v["time_s"] > 0}
        assert marked == set(ph)
    # eerl's figures in TRL's own log entries (averaged since the last entry, as TRL does).
    logged = [h for h in trainer.state.log_history if "eerl/observed" in h]
    assert len(logged) == 3 and logged[-1]["eerl/observed"] == 3


def test_generate_batch_path(model_dir, tmp_path, monkeypatch):
    # transformers' continuous batching (generate_batch), no reference model (beta = 0).
    trainer = trl_tiny.trainer(model_dir, str(tmp_path / "out"), max_steps=2, beta=0.0,
                               use_transformers_continuous_batching=True)
    rec = trl_tiny.Record(trainer, monkeypatch)
    s, _ = train_hooked(trainer)
    assert rec.steps == [[["transformers.generate_batch"], []]] * 2
    assert s.phases() == ["training", "generation", "training", "training", "|"] * 2
    assert [(u[0], u[1], u[2]) for u in s.updates] == [(g["G"], g["N"], g["L"]) for g in rec.gens]


def test_n_honours_the_env_and_tool_mask(model_dir, tmp_path, monkeypatch):
    # A rollout_func returning env_mask (TRL treats it as tool_mask: 0 = tokens the model did not
    # generate): N = TRL's loss mask (completion_mask x tool_mask), G = the model's tokens.
    trainer = trl_tiny.trainer(model_dir, str(tmp_path / "out"), max_steps=2, beta=0.0,
                               rollout_func=trl_tiny.rollout_with_env_tokens,
                               mask_truncated_completions=True)
    rec = trl_tiny.Record(trainer, monkeypatch)
    s, _ = train_hooked(trainer)
    assert s.phases() == ["training", "generation", "training", "training", "|"] * 2
    for u, g in zip(s.updates, rec.gens):
        assert g["tool_tokens"] > 0 and g["N"] < g["all_completion_tokens"]
        assert (u[0], u[1], u[2]) == (g["G"], g["N"], g["L"])


def test_a_renamed_generation_block_warns_once_or_stops_when_strict(model_dir, tmp_path,
                                                                    monkeypatch):
    # A TRL whose generation block is named differently: the hook cannot tell at install; the
    # first update says what was missing and which unmapped blocks it saw.
    orig = grpo_module.profiling_context

    def renamed(trainer, name):
        return orig(trainer, "hf.generate" if name == "transformers.generate" else name)

    monkeypatch.setattr(grpo_module, "profiling_context", renamed)
    trainer = trl_tiny.trainer(model_dir, str(tmp_path / "a"), max_steps=2, beta=0.0)
    with pytest.warns(RuntimeWarning) as w:
        s, hook = train_hooked(trainer)
    msgs = [str(x.message) for x in w if "no generation phase" in str(x.message)]
    assert len(msgs) == 1, [str(x.message) for x in w]
    assert "TRL %s" % trl.__version__ in msgs[0] and "hf.generate" in msgs[0]
    assert len(s.updates) == 2 and hook.driver.blind_updates == 2

    trainer = trl_tiny.trainer(model_dir, str(tmp_path / "b"), max_steps=2, beta=0.0)
    s = RecordingSession()
    with pytest.raises(IntegrationError, match="update 1 ended with no generation phase"):
        train_hooked(trainer, s, strict=True)
    assert len(s.updates) == 1  # recorded before the check stopped the run
    # The user's way out: map the name this TRL uses.
    trainer = trl_tiny.trainer(model_dir, str(tmp_path / "c"), max_steps=1, beta=0.0)
    s, _ = train_hooked(trainer, strict=True, phases={"hf.generate": "generation"})
    assert s.phases() == ["training", "generation", "training", "training", "|"]


def test_missing_hook_points_are_refused_naming_the_version(model_dir, tmp_path, monkeypatch):
    trainer = trl_tiny.trainer(model_dir, str(tmp_path / "out"), max_steps=1)
    s = RecordingSession()
    with monkeypatch.context() as m:
        m.delattr(profiling, "ProfilingContext")
        with pytest.raises(IntegrationError) as e:
            eerl_trl.install(s, trainer)
    assert "TRL %s has no trl.extras.profiling.ProfilingContext" % trl.__version__ in str(e.value)
    assert e.value.version == trl.__version__
    with monkeypatch.context() as m:
        m.delattr(GRPOTrainer, "_generate_and_score_completions")
        with pytest.raises(IntegrationError, match="has no GRPOTrainer._generate_and_score_compl"):
            eerl_trl.install(s, trainer)
    with monkeypatch.context() as m:  # _prepare_inputs no longer profiled
        m.setattr(GRPOTrainer, "_prepare_inputs", GRPOTrainer._prepare_inputs.__wrapped__)
        with pytest.raises(IntegrationError, match="a profiled GRPOTrainer._prepare_inputs"):
            eerl_trl.install(s, trainer)
    with pytest.raises(IntegrationError, match="has no object._generate_and_score_completions"):
        eerl_trl.install(s, object())
    # Nothing was left patched by the refusals.
    assert profiling.ProfilingContext.__enter__.__module__ == profiling.__name__
    assert "_generate_and_score_completions" not in vars(trainer) and trainer.callback_handler


def test_uninstall_restores_trl(model_dir, tmp_path):
    enter, exit_ = profiling.ProfilingContext.__enter__, profiling.ProfilingContext.__exit__
    trainer = trl_tiny.trainer(model_dir, str(tmp_path / "out"), max_steps=1)
    n = len(trainer.callback_handler.callbacks)
    hook = eerl_trl.install(RecordingSession(), trainer)
    assert profiling.ProfilingContext.__enter__ is not enter
    assert len(trainer.callback_handler.callbacks) == n + 1
    hook.uninstall()
    assert profiling.ProfilingContext.__enter__ is enter
    assert profiling.ProfilingContext.__exit__ is exit_
    assert len(trainer.callback_handler.callbacks) == n
    assert "_generate_and_score_completions" not in vars(trainer)
    # None is for the other processes; in the main process it is refused.
    with pytest.raises(ValueError, match="main process holds the job's session"):
        eerl_trl.install(None, trainer)
    assert profiling.ProfilingContext.__enter__ is enter


def test_blocks_of_another_trainer_class_are_not_this_hooks(model_dir, tmp_path):
    trainer = trl_tiny.trainer(model_dir, str(tmp_path / "out"), max_steps=1)
    s = RecordingSession()
    hook = eerl_trl.install(s, trainer)
    try:
        with profiling.ProfilingContext("RLOOTrainer.transformers.generate", report_to=[]):
            pass
        assert hook.driver.active is None and s.calls == []
    finally:
        hook.uninstall()


def test_two_processes_one_controller(model_dir, node, tmp_path):
    # torchrun, 2 processes on gloo, every one with the same line: rank 0 owns the one Session,
    # its pools the GPUs of both ranks (each rank's stand-in GPU, gathered over the job's
    # group); rank 1 is metered by rank 0's session.
    out = tmp_path / "ranks"
    out.mkdir()
    uuids = ["GPU-00000000-0000-0000-0000-%012d" % i for i in range(2)]
    env = child_env(EERL_FAKE_NVML_STATE=node, TRL_TINY_MODEL=model_dir, TRL_TINY_OUT=str(out),
                    OMP_NUM_THREADS=1, CUDA_VISIBLE_DEVICES=",".join(uuids))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(trl_tiny.free_port()),
           os.path.join(HERE, "trl_tiny.py")]
    p = subprocess.run(cmd, env=env, cwd=str(tmp_path), capture_output=True, text=True,
                       timeout=HANG_S)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    r0 = json.load(open(out / "rank0.json"))
    r1 = json.load(open(out / "rank1.json"))
    assert r0["world"] == 2 and r1["world"] == 2
    assert r0["pools"] == {"generation": [0, 1], "training": [0, 1]} and "calls" not in r1
    # Rank 1 may not hold a session of the explicit form: refused, naming why.
    assert "must live in TRL's main process" in r1["refused"]
    phases = per_update(r0["calls"])
    print("two-process phases per update:", phases)
    assert phases == [["training", "generation", "logprob", "training", "training"]] * 2
    ups = [x for x in map(json.loads, open(out / "eerl-run.jsonl")) if x["type"] == "update"]
    run = [json.loads(l) for l in open(out / "eerl-run.jsonl") if '"type": "run"' in l
           or '"type":"run"' in l]
    assert len(ups) == 2
    assert sorted(run[0]["pools"]["generation"]) == [0, 1]
    # Work summed over both processes' own tensors.
    for k, u in enumerate(ups):
        g0, g1 = r0["gens"][k], r1["gens"][k]
        assert u["work"]["G"] == g0["G"] + g1["G"]
        assert u["work"]["N"] == g0["N"] + g1["N"]
        assert u["work"]["L"] == max(g0["L"], g1["L"])


def test_two_nodes_one_controller(model_dir, tmp_path):
    # Two torchrun launches (--nnodes 2, one process each) as two nodes on this machine, each
    # with its own eerld over 2 stand-in GPUs of its own (tests/fake_nvml), every rank with the
    # same line: rank 0 holds the one MultiNodeSession of the job, its pools from where the
    # ranks' GPUs are; the other node serves it from a thread while it trains.
    import eerld_nodes
    out = tmp_path / "ranks"
    out.mkdir()
    nodes = eerld_nodes.start_nodes(tmp_path, 2)
    try:
        port = trl_tiny.free_port()
        launches = []
        for k in range(2):
            env = child_env(TRL_TINY_MODEL=model_dir, TRL_TINY_OUT=str(out), TRL_TINY_NODES=1,
                            OMP_NUM_THREADS=1, **nodes[k].env())
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                   "--node_rank", str(k), "--nproc_per_node", "1", "--master_addr", "127.0.0.1",
                   "--master_port", str(port), os.path.join(HERE, "trl_tiny.py")]
            launches.append(subprocess.Popen(cmd, env=env, cwd=str(tmp_path),
                                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                             text=True))
        logs = [p.communicate(timeout=HANG_S)[0] for p in launches]
        for p, log in zip(launches, logs):
            assert p.returncode == 0, log[-6000:]
        # After the session closed, every GPU of both nodes is back with the governor.
        for n in nodes:
            assert n.locks() == [(None, None)] * 2, n.locks()
    finally:
        for n in nodes:
            n.stop()
    r0 = json.load(open(out / "rank0.json"))
    r1 = json.load(open(out / "rank1.json"))
    # Each rank uses the first GPU it sees: GPU 0 of its node, found by UUID.
    assert r0["pools"] == {"generation": {"0": [0], "1": [0]}, "training": {"0": [0], "1": [0]}}
    phases = per_update(r0["calls"])
    print("two-node phases per update:", phases)
    assert phases == [["training", "generation", "logprob", "training", "training"]] * 2
    ups = [x for x in map(json.loads, open(out / "eerl-run.jsonl")) if x["type"] == "update"]
    assert len(ups) == 2
    for k, u in enumerate(ups):
        g0, g1 = r0["gens"][k], r1["gens"][k]
        assert (u["work"]["G"], u["work"]["N"], u["work"]["L"]) == (
            g0["G"] + g1["G"], g0["N"] + g1["N"], max(g0["L"], g1["L"]))
        assert u["energy_j"] > 0


def test_resume_with_trls_checkpoint(model_dir, node, tmp_path):
    # The EerlCheckpoint callback of docs/integrations/trl.md: eerl's state lands in TRL's own
    # checkpoint directories, and a session opened on one of them resumes from it.
    from transformers import TrainerCallback

    out = str(tmp_path / "out")
    session = eerl.Session(pools={"generation": [0], "training": [0]}, observe_only=True,
                           strategy="eerl", resume_from=None)

    class EerlCheckpoint(TrainerCallback):
        def on_save(self, args, state, control, **kw):
            session.save_state(os.path.join(args.output_dir, "checkpoint-%d" % state.global_step))

    trainer = trl_tiny.trainer(model_dir, out, max_steps=2, beta=0.0, save_strategy="steps",
                               save_steps=1)
    trainer.add_callback(EerlCheckpoint())
    hook = eerl_trl.install(session, trainer)
    try:
        trainer.train()
    finally:
        hook.uninstall()
        session.close()
    for step in (1, 2):
        assert os.path.getsize(os.path.join(out, "checkpoint-%d" % step, "eerl-controller.state"))
    resume = os.path.join(out, "checkpoint-1")
    s2 = eerl.Session(pools={"generation": [0], "training": [0]}, observe_only=True,
                      strategy="eerl", resume_from=resume)
    try:
        # The state was read from TRL's checkpoint; after 2 updates it is still calibrating, so
        # it is refused for a fresh search, saying why (docs/controller.md, "Resume").
        assert resume in s2.resume_detail and "too few to skip calibration" in s2.resume_detail
        assert s2.resumed is False
        trainer = trl_tiny.trainer(model_dir, out, max_steps=2, beta=0.0, save_strategy="no")
        hook = eerl_trl.install(s2, trainer)
        try:
            trainer.train(resume_from_checkpoint=resume)
        finally:
            hook.uninstall()
        assert trainer.state.global_step == 2 and hook.updates == 1  # step 2 only
    finally:
        s2.close()


# ---- the one line: EerlCallback ---------------------------------------------------------------


@pytest.fixture
def eerld_node(tmp_path, monkeypatch):
    """One eerld over 2 simulated GPUs (eerld --devices twin), reached through $EERL_SOCKET, as
    on a machine without CUDA where a user tries eerl; stopped after the test."""
    import eerld_nodes
    n = eerld_nodes.TwinNode(tmp_path / "eerld")
    monkeypatch.setenv("EERL_SOCKET", n.socket)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    try:
        yield n
    finally:
        n.stop()


@pytest.fixture
def nvml_node(tmp_path, monkeypatch):
    """One eerld over 2 stand-in NVML GPUs (real GPUs, as far as eerl can tell), reached
    through $EERL_SOCKET; stopped after the test."""
    import eerld_nodes
    n = eerld_nodes.start_nodes(tmp_path / "eerld", 1)[0]
    monkeypatch.setenv("EERL_SOCKET", n.socket)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    try:
        yield n
    finally:
        n.stop()


class Watch:
    """A TrainerCallback-like recorder of, at each step's end, whether the callback's session
    is observe-only and who holds the node's GPUs (eerld's status)."""

    def __init__(self, cb, node):
        from transformers import TrainerCallback
        seen = self.seen = []

        class W(TrainerCallback):
            def on_step_end(self, *a, **k):
                seen.append((cb.session.observe_only, node.holders()))
        self.callback = W()


def trace_lines(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def test_one_line_finds_the_pools_and_gives_the_clocks_back(model_dir, eerld_node, tmp_path,
                                                            monkeypatch):
    # GRPOTrainer(..., callbacks=[EerlCallback()]): no Session, no install, no close. No process
    # has a CUDA device, so the callback takes the GPUs of the eerld it reaches and says so.
    trace = str(tmp_path / "eerl-run.jsonl")
    cb = eerl_trl.EerlCallback(trace=trace)
    watch = Watch(cb, eerld_node)
    trainer = trl_tiny.trainer(model_dir, str(tmp_path / "out"), max_steps=3, eval_steps=2,
                               callbacks=[cb, watch.callback])
    rec = trl_tiny.Record(trainer, monkeypatch)
    with pytest.warns(UserWarning) as w:
        trainer.train()
    said = [str(x.message) for x in w if x.category is UserWarning and "eerl" in str(x.message)]
    assert len(said) == 1 and "takes the GPUs of eerld at %s" % eerld_node.socket in said[0]
    assert not [x for x in w if issubclass(x.category, RuntimeWarning)]  # a good run: none
    assert cb.mode == "colocated" and cb.pools == {"generation": [0, 1], "training": [0, 1]}
    # The twin's GPUs are simulated: the session controls them (it holds their lease).
    assert watch.seen and all(not obs and all(holders) for obs, holders in watch.seen)
    # Closed at on_train_end: every clock is the governor's, no session is left open.
    assert cb.session is None and eerl.live_sessions() == []
    assert eerld_node.locks() == [(None, None)] * 2
    lines = trace_lines(trace)
    run = [l for l in lines if l["type"] == "run"][0]
    assert sorted(run["pools"]["generation"]) == [0, 1] and run["framework"] == "TRL 1.16.0"
    assert "eerld at %s" % eerld_node.socket in run["pools_from"]
    ups = [l for l in lines if l["type"] == "update"]
    assert len(ups) == 3 == len(rec.steps) == len(rec.gens)
    for u, g, step in zip(ups, rec.gens, rec.steps):
        assert (u["work"]["G"], u["work"]["N"], u["work"]["L"]) == (g["G"], g["N"], g["L"])
        want = {"training"} | {eerl_trl.PHASES[b] for blocks in step for b in blocks}
        assert {p for p, v in u["phases"].items() if p != "other" and v["time_s"] > 0} == want
    logged = [h for h in trainer.state.log_history if "eerl/observed" in h]
    assert len(logged) == 3 and logged[-1]["eerl/observed"] == 3
    # The callback stays with the trainer: a second train() opens a session of its own, once
    # the first's trace is moved away (eerl never overwrites a trace: docs/runtime.md).
    os.rename(trace, trace + ".first")
    trainer.args.max_steps = 4
    with pytest.warns(UserWarning, match="takes the GPUs of eerld"):
        trainer.train(resume_from_checkpoint=None)
    assert eerl.live_sessions() == []


def test_one_line_added_with_add_callback(model_dir, eerld_node, tmp_path, monkeypatch):
    # Added after the trainer was made: the callback finds its trainer at on_train_begin.
    trainer = trl_tiny.trainer(model_dir, str(tmp_path / "out"), max_steps=2, beta=0.0)
    rec = trl_tiny.Record(trainer, monkeypatch)
    cb = eerl_trl.EerlCallback(trace=str(tmp_path / "t.jsonl"), observe_only=True)
    trainer.add_callback(cb)
    with pytest.warns(UserWarning, match="takes the GPUs of eerld"):
        trainer.train()
    ups = [l for l in trace_lines(tmp_path / "t.jsonl") if l["type"] == "update"]
    assert [(u["work"]["G"], u["work"]["N"], u["work"]["L"]) for u in ups] == [
        (g["G"], g["N"], g["L"]) for g in rec.gens]
    assert eerl.live_sessions() == []


def test_one_line_closes_the_session_when_training_fails(model_dir, eerld_node, tmp_path):
    # A reward function that fails in the second step: train() raises, and the session the
    # callback opened is closed on the way out (on_train_end never comes).
    calls = []

    def reward_fails(completions, **kw):
        calls.append(1)
        if len(calls) > 1:
            raise KeyError("reward server gone")
        return [float(len(c)) for c in completions]

    cb = eerl_trl.EerlCallback(trace=str(tmp_path / "t.jsonl"))
    trainer = trl_tiny.trainer(model_dir, str(tmp_path / "out"), max_steps=3, beta=0.0,
                               callbacks=[cb])
    trainer.reward_funcs = [reward_fails]
    with pytest.warns(UserWarning, match="takes the GPUs"), pytest.raises(KeyError):
        trainer.train()
    assert cb.session is None and eerl.live_sessions() == []
    assert eerld_node.locks() == [(None, None)] * 2
    assert len([l for l in trace_lines(tmp_path / "t.jsonl") if l["type"] == "update"]) == 1


def test_one_line_takes_only_session_keywords():
    with pytest.raises(TypeError, match="mode: the mode comes from the trainer"):
        eerl_trl.EerlCallback(mode="colocated")
    with pytest.raises(TypeError, match="trace_path: no such keyword"):
        eerl_trl.EerlCallback(trace_path="x.jsonl")
    with pytest.raises(ValueError, match="pools="):
        eerl_trl.EerlCallback(pools={"gen": [0]})


def _refused(trainer, match, exc=ValueError):
    """train() refuses with exc matching match, before any session opened or clock changed."""
    with pytest.raises(exc, match=match):
        trainer.train()
    assert eerl.live_sessions() == [] and trainer.state.global_step == 0


@pytest.mark.parametrize("visible", [None, ""])
def test_one_line_only_observes_real_gpus_the_job_does_not_use(model_dir, nvml_node, tmp_path,
                                                               monkeypatch, visible):
    # No process has a CUDA device (CUDA_VISIBLE_DEVICES unset, or set to ""), and the GPUs
    # eerld serves are real (stand-in NVML), so other users' jobs may run on them: the callback
    # observes them (no lease, no clock) and says so once, naming why and how to name the pools.
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    cb = eerl_trl.EerlCallback(trace=str(tmp_path / "t.jsonl"))
    watch = Watch(cb, nvml_node)
    trainer = trl_tiny.trainer(model_dir, str(tmp_path / "out"), max_steps=2, beta=0.0,
                               callbacks=[cb, watch.callback])
    with pytest.warns(UserWarning) as w:
        trainer.train()
    said = [str(x.message) for x in w if x.category is UserWarning and "eerl" in str(x.message)]
    assert len(said) == 1, said
    why = ("CUDA_VISIBLE_DEVICES is not set" if visible is None else
           'CUDA_VISIBLE_DEVICES="" hides every GPU')
    assert why in said[0] and "is not set" not in said[0].replace(why, ""), said[0]
    assert "the GPUs of eerld at %s are real GPUs" % nvml_node.socket in said[0], said[0]
    assert "eerl only observes them (observe-only: no lease, no clock changed)" in said[0]
    assert "EerlCallback(pools=" in said[0]
    assert len(watch.seen) == 2
    assert all(obs and holders == [None, None] for obs, holders in watch.seen), watch.seen
    assert nvml_node.locks() == [(None, None)] * 2
    run = [l for l in trace_lines(tmp_path / "t.jsonl") if l["type"] == "run"][0]
    assert "eerl only observes them" in run["pools_from"]
    # Naming the pools is the user's word: the session controls them.
    cb = eerl_trl.EerlCallback(pools={"training": [0, 1]})
    watch = Watch(cb, nvml_node)
    trainer = trl_tiny.trainer(model_dir, str(tmp_path / "out2"), max_steps=1, beta=0.0,
                               callbacks=[cb, watch.callback])
    trainer.train()
    assert [(obs, holders[0] is not None) for obs, holders in watch.seen] == [(False, True)]


def test_one_line_refuses_bad_pools_naming_them(model_dir, nvml_node, tmp_path, monkeypatch):
    eerld_node = nvml_node
    u = eerld_node.uuids
    t = trl_tiny.trainer(model_dir, str(tmp_path / "a"), max_steps=1,
                         callbacks=[eerl_trl.EerlCallback(pools={"training": [5]})])
    _refused(t, r"pools\['training'\]: GPU 5 is not one eerl can reach: eerld at %s, which "
                r"has 0 \(%s\), 1 \(%s\)" % (eerld_node.socket, u[0], u[1]))
    # This process's GPU is the stand-in node's GPU 0 (CUDA_VISIBLE_DEVICES, no CUDA here): a
    # pool on GPU 1 is one the job does not use.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", u[0])
    t = trl_tiny.trainer(model_dir, str(tmp_path / "b"), max_steps=1, callbacks=[
        eerl_trl.EerlCallback(pools={"generation": [0], "training": [1]})])
    _refused(t, r"pools\['training'\] has GPU 1, which the job does not use \(its processes "
                r"use \[0\]\)")
    # A GPU no eerld serves.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-99999999-0000-0000-0000-000000000000")
    t = trl_tiny.trainer(model_dir, str(tmp_path / "c"), max_steps=1,
                         callbacks=[eerl_trl.EerlCallback()])
    _refused(t, r"rank None \(pid %d, CUDA_VISIBLE_DEVICES entry 0 \(no CUDA here\)\): GPU "
                r"GPU-99999999-0000-0000-0000-000000000000 is not one eerl can reach: eerld"
             % os.getpid())
    assert eerld_node.locks() == [(None, None)] * 2
    # With the job's GPU known, the one line takes it alone.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", u[1])
    cb = eerl_trl.EerlCallback(observe_only=True)
    t = trl_tiny.trainer(model_dir, str(tmp_path / "d"), max_steps=1, callbacks=[cb])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to say: the pools are the job's
        t.train()
    assert cb.pools == {"generation": [1], "training": [1]}


def test_one_line_refuses_a_trl_whose_hook_points_moved(model_dir, eerld_node, tmp_path,
                                                        monkeypatch):
    t = trl_tiny.trainer(model_dir, str(tmp_path / "a"), max_steps=1,
                         callbacks=[eerl_trl.EerlCallback()])
    monkeypatch.delattr(GRPOTrainer, "_generate_and_score_completions")
    _refused(t, "TRL %s has no GRPOTrainer._generate_and_score_completions" % trl.__version__,
             IntegrationError)


def test_one_line_with_trls_checkpoints(model_dir, eerld_node, tmp_path):
    # The one line's session saves eerl's state into TRL's checkpoints (docs/integrations/trl.md,
    # "Resume"), and a one line opened on one of them reads it.
    from transformers import TrainerCallback

    out = str(tmp_path / "out")
    eerl_cb = eerl_trl.EerlCallback(observe_only=True)

    class EerlCheckpoint(TrainerCallback):
        def on_save(self, args, state, control, **kw):
            if eerl_cb.session is not None:
                eerl_cb.session.save_state(os.path.join(args.output_dir,
                                                        "checkpoint-%d" % state.global_step))

    trainer = trl_tiny.trainer(model_dir, out, max_steps=2, beta=0.0, save_strategy="steps",
                               save_steps=1, callbacks=[eerl_cb, EerlCheckpoint()])
    with pytest.warns(UserWarning, match="takes the GPUs"):
        trainer.train()
    for step in (1, 2):
        assert os.path.getsize(os.path.join(out, "checkpoint-%d" % step, "eerl-controller.state"))
    resume = os.path.join(out, "checkpoint-1")
    eerl_cb = eerl_trl.EerlCallback(observe_only=True, resume_from=resume)
    trainer = trl_tiny.trainer(model_dir, out, max_steps=2, beta=0.0, save_strategy="no",
                               callbacks=[eerl_cb])
    seen = []

    class Resumed(TrainerCallback):
        def on_step_end(self, *a, **k):
            seen.append(eerl_cb.session.resume_detail)

    trainer.add_callback(Resumed())
    with pytest.warns(UserWarning, match="takes the GPUs"):
        trainer.train(resume_from_checkpoint=resume)
    assert trainer.state.global_step == 2 and len(seen) == 1
    assert resume in seen[0] and "too few to skip calibration" in seen[0]
