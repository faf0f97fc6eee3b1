"""The verl hook against the installed verl (0.9.1 from PyPI): verl's own trainer code runs on the
CPU, only what runs on GPUs in a real job is replaced (python/tests/verl_cpu.py: the rollout
engine with its agent loop, the actor/ref worker group, the weight sync). The v1 trainers run
on a real TransferQueue over a local Ray instance, as verl's own *_on_cpu tests do.

Checked per step: the phases eerl saw, G (the mask rollout produced), N (what the actor was handed
to train on), L, the policy age from the batch's tags, eerl's figures in what verl logged; then
a real eerl.Session on the stand-in NVML node, bad input (missing / renamed hook points) and
uninstall."""

import json
import os
import sys
import warnings

import pytest

import eerl
from conftest import RecordingSession, read_locks
from eerl.integrations import verl as eerl_verl
from eerl.integrations._common import IntegrationError

import verl_cpu

STEPS = 4


def steps_of(s):
    """RecordingSession phases split per update: [[phase, ...], ...]."""
    out, cur = [], []
    for p in s.phases():
        if p == "|":
            out.append(cur)
            cur = []
        else:
            cur.append(p)
    return out


def pools_of(s):
    """(phase, pool) begun per update."""
    out, cur = [], []
    for c in s.calls:
        if c[0] == "begin":
            cur.append((c[1], c[2] if len(c) > 2 else None))
        elif c[0] == "update":
            out.append(cur)
            cur = []
    return out


class PoolSession(RecordingSession):
    """RecordingSession that also records the pool of each phase call (separate-pool modes)."""

    def __init__(self, mode):
        RecordingSession.__init__(self, mode)
        self._update = 0

    def phase_begin(self, name, pool=None):
        key = (name, pool)
        from eerl import EerlError
        if key in self.open:
            raise EerlError(-15, "beginning phase %s" % name, "already in it")
        self.open.append(key)
        self.calls.append(("begin", name, pool))

    def phase_end(self, name, pool=None):
        key = (name, pool)
        from eerl import EerlError
        if key not in self.open:
            raise EerlError(-15, "ending phase %s" % name, "not in it")
        self.open.remove(key)
        self.calls.append(("end", name, pool))

    def update_end(self, *a, **kw):
        r = RecordingSession.update_end(self, *a, **kw)
        self._update += 1
        return r


@pytest.fixture(scope="module")
def tq():
    with verl_cpu.transfer_queue() as q:
        yield q


def run_v1(mode, session, tq, steps=STEPS, **kw):
    hook = eerl_verl.install(session, strict=kw.pop("strict", True))
    try:
        run = verl_cpu.V1Run(mode, steps=steps, **kw)
        run.fit()
    finally:
        hook.uninstall()
    return hook, run


def check_work(s, run):
    """G, N, L per update against what rollout produced and the actor trained on."""
    assert len(s.updates) == len(run.trained) == run.steps
    for (G, N, L, _), t in zip(s.updates, run.trained):
        assert G == t["generated"] and N == t["trained"] and L == t["longest"]


def test_v1_sync(tq):
    s = PoolSession("colocated")
    hook, run = run_v1("sync", s, tq)
    one = ["generation", "logprob", "logprob", "training", "refit"]
    assert steps_of(s) == [one] * STEPS
    check_work(s, run)
    assert all(G == N for G, N, _, _ in s.updates)  # no rollout correction: every token trains
    assert [v for _, _, _, v in s.updates] == [0, 1, 2, 3]  # on-policy: age 0
    assert "verl.trainer.ppo.v1.trainer_base" in hook.modules
    assert "verl.trainer.ppo.v1.trainer_sync" in hook.modules
    logged = run.logged
    assert len(logged) == STEPS and logged[0]["eerl/observed"] == 1
    assert "response_length/mean" in logged[0] and "eerl/state" not in logged[0]


def test_v1_sync_rollout_correction_rewrites_the_mask(tq):
    s = PoolSession("colocated")
    hook, run = run_v1("sync", s, tq, correction=True)
    check_work(s, run)
    assert all(N < G for G, N, _, _ in s.updates), s.updates  # tokens rejected: N is the rest
    # verl's own figure: the fraction of response tokens rejection sampling masked out
    for (G, N, _, _), m in zip(s.updates, run.logged):
        assert abs(N - G * (1 - m["rollout_corr/rollout_rs_masked_fraction"])) < 1e-3 * G


def test_v1_colocate_async(tq):
    s = PoolSession("colocated")
    hook, run = run_v1("colocate_async", s, tq)
    one = ["generation", "logprob", "logprob", "training", "refit"]
    assert steps_of(s) == [one] * STEPS
    check_work(s, run)
    # one warm-up batch: step 1 trains on the warm-up (version 0), then one version behind
    ages = [u - v for u, (_, _, _, v) in enumerate(s.updates)]
    assert ages == [0, 1, 1, 1], ages
    assert "verl.trainer.ppo.v1.trainer_colocate_async" in hook.modules


def test_v1_separate_async_drained(tq):
    s = PoolSession("drained")
    hook, run = run_v1("separate_async", s, tq)
    per = pools_of(s)
    # the generation pool generates throughout, paused for the weight sync; the trainer's "gen"
    # (waiting for samples) is no phase
    first = [("generation", "generation"), ("logprob", None), ("logprob", None),
             ("training", None), ("refit", None), ("generation", "generation")]
    assert per == [first] * STEPS, per
    assert s.open == [] and s.calls[-1] == ("end", "generation", "generation")  # uninstall
    check_work(s, run)
    ages = [u - v for u, (_, _, _, v) in enumerate(s.updates)]
    assert ages == [0, 1, 1, 1], ages


def test_v1_with_a_real_session(node, tq, tmp_path):
    trace = str(tmp_path / "verl.jsonl")
    s = eerl.Session(mode="colocated", pools={"generation": [0, 1], "training": [0, 1]},
                     trace=trace)
    try:
        hook, run = run_v1("sync", s, tq, steps=3)
    finally:
        s.close()
    ups = [u for u in map(json.loads, open(trace)) if u.get("type") == "update"]
    assert len(ups) == 3
    assert [u["work"]["N"] for u in ups] == [t["trained"] for t in run.trained]
    assert [u["work"]["G"] for u in ups] == [t["generated"] for t in run.trained]
    assert all(u["work"].get("policy_age") == 0 for u in ups)
    assert run.logged[-1]["eerl/update_energy_j"] > 0
    assert read_locks(node) == [(None, None), (None, None)]


# ---- bad input ------------------------------------------------------------------------------


def test_a_verl_without_its_hook_points_is_refused(monkeypatch):
    import verl.trainer.ppo.v1.trainer_base as tb
    monkeypatch.delattr(tb, "compute_data_metrics")
    with pytest.raises(IntegrationError) as e:
        eerl_verl.install(RecordingSession())
    msg = str(e.value)
    assert "verl 0.9.1" in msg and "verl.trainer.ppo.v1.trainer_base.compute_data_metrics" in msg
    assert e.value.framework == "verl" and e.value.version == "0.9.1"


def test_a_renamed_timer_function_is_refused(monkeypatch):
    import verl.utils.debug as debug
    monkeypatch.delattr(debug, "marked_timer")
    with pytest.raises(IntegrationError, match="verl.utils.debug.marked_timer"):
        eerl_verl.install(RecordingSession())


def test_renamed_stages_stop_a_strict_run_clocks_back_trace_kept(node, tq, tmp_path):
    import verl.trainer.ppo.v1.trainer_base as tb
    trace = str(tmp_path / "renamed.jsonl")
    s = eerl.Session(mode="colocated", pools={"generation": [0, 1], "training": [0, 1]},
                     trace=trace)
    hook = eerl_verl.install(s, strict=True)
    hooked = tb.marked_timer
    # a verl whose trainer names its stages differently ("rollout" for "gen", ...)
    tb.marked_timer = lambda name, *a, **k: hooked({"gen": "rollout"}.get(name, name), *a, **k)
    try:
        with pytest.raises(IntegrationError) as e:
            verl_cpu.V1Run("sync", steps=3).fit()
        locks_during = read_locks(node)
    finally:
        tb.marked_timer = hooked
        hook.uninstall()
        s.close()
    msg = str(e.value)
    assert "verl 0.9.1" in msg and "no generation phase" in msg and "rollout" in msg, msg
    assert e.value.missing == ["generation"]
    # the first update is kept in the trace; the session gave the clocks back
    ups = [l for l in open(trace) if '"update"' in l and '"work"' in l]
    assert len(ups) == 1
    assert read_locks(node) == [(None, None), (None, None)]
    del locks_during


def fit_with(hook, module, name, replacement, fit):
    """fit() with module.name replaced by replacement (put back after, and the hook uninstalled);
    returns every warning it gave."""
    orig = getattr(module, name)
    setattr(module, name, replacement)
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fit()
    finally:
        setattr(module, name, orig)
        hook.uninstall()
    return w


def test_renamed_stages_warn_once_when_not_strict(tq):
    import verl.trainer.ppo.v1.trainer_base as tb
    s = PoolSession("colocated")
    hook = eerl_verl.install(s)
    hooked = tb.marked_timer
    renamed = lambda name, *a, **k: hooked({"gen": "generate"}.get(name, name), *a, **k)  # noqa
    w = fit_with(hook, tb, "marked_timer", renamed, lambda: verl_cpu.V1Run("sync", steps=2).fit())
    msgs = [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)
            and "eerl:" in str(x.message)]
    assert len(msgs) == 1, msgs
    assert "no generation phase seen" in msgs[0] and "generate" in msgs[0]
    assert "verl 0.9.1" in msgs[0]
    assert hook.driver.blind_updates == 2 and len(s.updates) == 2  # updates still recorded


def test_uninstall_puts_verl_back():
    import verl.trainer.ppo.metric_utils as mu
    import verl.trainer.ppo.ray_trainer as rt
    import verl.trainer.ppo.v1.trainer_base as tb
    import verl.utils.debug as debug
    before = (tb.marked_timer, tb.compute_data_metrics, rt.marked_timer, debug.marked_timer,
              mu.compute_data_metrics, tb.PPOTrainer._compute_metrics)
    hook = eerl_verl.install(RecordingSession())
    assert tb.marked_timer is not before[0] and rt.compute_data_metrics is not before[1]
    assert tb.marked_timer.__wrapped__ is before[0] and debug.marked_timer.__wrapped__ is before[0]
    hook.uninstall()
    after = (tb.marked_timer, tb.compute_data_metrics, rt.marked_timer, debug.marked_timer,
             mu.compute_data_metrics, tb.PPOTrainer._compute_metrics)
    assert all(a is b for a, b in zip(before, after))


@pytest.mark.parametrize("separation", [False, True], ids=["legacy", "separation"])
def test_legacy_trainer(separation):
    s = PoolSession("colocated")
    hook = eerl_verl.install(s, strict=True)
    try:
        run = verl_cpu.LegacyRun(steps=3, separation=separation)
        run.fit()
    finally:
        hook.uninstall()
    assert steps_of(s) == [["generation", "logprob", "logprob", "training", "refit"]] * 3
    check_work(s, run)
    assert [v for _, _, _, v in s.updates] == [0, 1, 2]  # age 0 from the batch's versions
    assert run.logged[0]["eerl/observed"] == 1
    assert type(run.trainer).__module__ in hook.modules


def test_legacy_trainer_rollout_correction_rewrites_the_mask():
    s = PoolSession("colocated")
    hook = eerl_verl.install(s, strict=True)
    try:
        run = verl_cpu.LegacyRun(steps=2, correction=True)
        run.fit()
    finally:
        hook.uninstall()
    check_work(s, run)
    assert all(N < G for G, N, _, _ in s.updates), s.updates


def test_one_step_off_policy_drained():
    s = PoolSession("drained")
    hook = eerl_verl.install(s, strict=True)
    try:
        run = verl_cpu.OneStepOffRun(steps=3)
        run.fit()
    finally:
        hook.uninstall()
    gen, rest = ("generation", "generation"), [("logprob", None), ("logprob", None),
                                               ("training", None)]
    refit = ("refit", None)
    # the initial weight push, then per step: the weight sync, the next batch's generation on
    # the rollout pool (overlapping this step's log-prob and training); the last step starts none
    assert pools_of(s) == [[refit, gen, refit, gen] + rest, [refit, gen] + rest, [refit] + rest]
    assert s.open == []
    check_work(s, run)
    ages = [u - v for u, (_, _, _, v) in enumerate(s.updates)]
    assert ages == [0, 1, 1], ages
    assert "verl.experimental.one_step_off_policy.ray_trainer" in hook.modules


def test_every_trainer_module_is_reached():
    hook = eerl_verl.install(RecordingSession())
    try:
        want = {"verl.trainer.ppo.v1.trainer_base", "verl.trainer.ppo.v1.trainer_sync",
                "verl.trainer.ppo.v1.trainer_colocate_async",
                "verl.trainer.ppo.v1.trainer_separate_async", "verl.trainer.ppo.ray_trainer",
                "verl.experimental.separation.ray_trainer",
                "verl.experimental.one_step_off_policy.ray_trainer",
                "verl.experimental.fully_async_policy.fully_async_trainer"}
        assert want <= set(hook.modules), want - set(hook.modules)
        assert hook.skipped == {}
        # a module imported after install() binds the wrapper: verl.utils.debug is patched
        import verl.utils.debug as debug
        assert debug.marked_timer.__wrapped__ is not None
    finally:
        hook.uninstall()


def test_a_recipe_without_its_hook_point_is_refused(monkeypatch):
    import verl.experimental.one_step_off_policy.ray_trainer as osop
    monkeypatch.delattr(osop, "marked_timer")
    with pytest.raises(IntegrationError,
                       match="verl.experimental.one_step_off_policy.ray_trainer.marked_timer"):
        eerl_verl.install(RecordingSession())


@pytest.mark.parametrize("mode", ["disaggregated", "inflight"])
def test_modes_verl_does_not_run_are_refused(mode):
    with pytest.raises(IntegrationError, match="drained") as e:
        eerl_verl.install(RecordingSession(mode))
    assert "verl 0.9.1" in str(e.value) and repr(mode) in str(e.value)


def test_a_step_without_compute_data_metrics_is_named(tq):
    import verl.trainer.ppo.v1.trainer_base as tb
    s = PoolSession("colocated")
    hook = eerl_verl.install(s)
    # a verl that reports its metrics elsewhere
    w = fit_with(hook, tb, "compute_data_metrics", tb.compute_data_metrics.__wrapped__,
                 lambda: verl_cpu.V1Run("sync", steps=3).fit())
    msgs = [str(x.message) for x in w if "compute_data_metrics" in str(x.message)]
    assert len(msgs) == 1 and "verl 0.9.1" in msgs[0], msgs
    assert s.updates == [] and hook.driver.blind_updates == 2


def test_fully_async_policy_drained(tq):
    s = PoolSession("drained")
    hook = eerl_verl.install(s, strict=True)
    try:
        run = verl_cpu.FullyAsyncRun(steps=3)
        run.fit()
    finally:
        hook.uninstall()
    gen = ("generation", "generation")
    # this recipe's config takes the rollout's log-probs as old (rollout_correction bypass_mode):
    # the one log-prob stage is the reference's, as verl's own timings say
    one = [gen, ("logprob", None), ("training", None), ("refit", None), gen]
    assert pools_of(s) == [one] * 3, pools_of(s)
    assert run.logged and all("timing_s/ref" in m and "timing_s/old_log_prob" not in m
                              and "eerl/observed" in m for m in run.logged)
    check_work(s, run)
    ages = [u - v for u, (_, _, _, v) in enumerate(s.updates)]
    assert ages == [0, 1, 1], ages  # the rollouter ran one step ahead


# ---- the one line: python -m eerl.integrations.verl.main_ppo ------------------------------------

# What the tests add to verl's overrides for the job to run on the CPU (verl_job.py): Ray on
# loopback with n GPUs declared and the stand-ins loaded in its workers, verl's validation's
# micro-batch sizes, one TransferQueue storage unit.
def job_overrides(n_gpus):
    from conftest import RAY_NODE_IP
    return ["ray_kwargs.ray_init.num_cpus=4", "+ray_kwargs.ray_init.num_gpus=%d" % n_gpus,
            "+ray_kwargs.ray_init.include_dashboard=False",
            "+ray_kwargs.ray_init._node_ip_address=%s" % RAY_NODE_IP,
            "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=verl_job.setup",
            "+actor_rollout_ref.rollout.agent.agent_loop_manager_class=verl_job.AgentLoop",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
            "transfer_queue.backend.SimpleStorage.num_data_storage_units=1"]


class TwinEerld:
    """eerld serving n simulated GPUs (--devices twin:h100xN) on a socket of its own."""

    def __init__(self, root, n):
        import subprocess
        from conftest import BUILD
        self.dir = os.path.join(str(root), "eerld")
        os.makedirs(self.dir, mode=0o700)
        self.socket = os.path.join(self.dir, "eerld.sock")
        policy = os.path.join(self.dir, "policy.conf")
        open(policy, "w").close()
        self.log = os.path.join(self.dir, "eerld.log")
        self.proc = subprocess.Popen(
            [os.path.join(BUILD, "eerld"), "--socket", self.socket, "--state-dir",
             os.path.join(self.dir, "state"), "--devices", "twin:h100x%d" % n, "--foreground",
             "--policy", policy], stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        import eerld_nodes
        eerld_nodes.wait_for(lambda: os.path.exists(self.socket) or self.proc.poll() is not None,
                             60, "eerld's socket")
        assert self.proc.poll() is None, open(self.log).read()

    def devices(self):
        from eerl.agent import Agent
        a = Agent(socket=self.socket, heartbeat=False)
        try:
            return a.devices()
        finally:
            a.close()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def run_entry(tmp_path, mode, steps, n_gpus, ray_gpus=None, extra=(), **env):
    """python -m eerl.integrations.verl.main_ppo with verl's overrides for mode, against an eerld
    serving n_gpus twin GPUs (Ray declares ray_gpus, default as many); returns (completed
    process, per-step records of the stand-ins, trace lines, eerld's GPUs after)."""
    import subprocess
    from conftest import HANG_S, HERE, PYROOT, child_env
    eerld = TwinEerld(tmp_path, n_gpus)
    record = str(tmp_path / "record.jsonl")
    trace = str(tmp_path / "trace.jsonl")
    cmd = ([sys.executable, "-m", "eerl.integrations.verl.main_ppo"] +
           verl_cpu.overrides(mode, steps) + job_overrides(ray_gpus or n_gpus) +
           ["+eerl.trace=trace.jsonl"] + list(extra))
    e = child_env(EERL_SOCKET=eerld.socket, VERL_JOB_RECORD=record, RAY_DEDUP_LOGS=0, **env)
    e["PYTHONPATH"] = os.pathsep.join([PYROOT, HERE, e.get("PYTHONPATH", "")])
    try:
        p = subprocess.run(cmd, cwd=str(tmp_path), env=e, capture_output=True, text=True,
                           timeout=HANG_S)
        devices = eerld.devices()
    finally:
        eerld.stop()
    recs = [json.loads(x) for x in open(record)] if os.path.exists(record) else []
    lines = [json.loads(x) for x in open(trace)] if os.path.exists(trace) else []
    return p, recs, lines, devices


def check_trace(lines, recs, steps):
    """eerl's update lines against what the stand-ins produced and trained on, step by step."""
    ups = [u for u in lines if u["type"] == "update"]
    assert len(ups) == len(recs) == steps
    for u, r in zip(ups, recs):
        w = u["work"]
        assert (w["G"], w["N"], w["L"]) == (r["generated"], r["trained"], r["longest"])
    return ups


def test_main_ppo_one_line_v1_sync(tmp_path):
    p, recs, lines, devs = run_entry(tmp_path, "sync", 3, 2)
    assert p.returncode == 0, p.stderr[-4000:]
    run = [x for x in lines if x["type"] == "run"][0]
    assert run["mode"] == "colocated"  # verl's hybrid engine
    assert run["pools"] == {"generation": [0, 1], "training": [0, 1]}  # from its workers' GPUs
    assert run["framework"] == "verl 0.9.1" and "PPOTrainerSync" in run["trainer"]
    assert "actor_rollout_wg.workers" in run["pools_from"]
    ups = check_trace(lines, recs, 3)
    assert [u["work"]["policy_age"] for u in ups] == [0, 0, 0]
    assert all(sorted(u["phases"]) == ["generation", "logprob", "refit", "training"] for u in ups)
    assert [d["gpu"] for d in devs] == [0, 1]


def test_main_ppo_one_line_separate_async_is_drained(tmp_path):
    p, recs, lines, _ = run_entry(tmp_path, "separate_async", 3, 3)
    assert p.returncode == 0, p.stderr[-4000:]
    run = [x for x in lines if x["type"] == "run"][0]
    assert run["mode"] == "drained"  # rollout on GPUs of its own (hybrid_engine=False)
    # Ray gave the two training workers two GPUs and the rollout replica's worker the third
    assert sorted(run["pools"]["training"] + run["pools"]["generation"]) == [0, 1, 2]
    assert len(run["pools"]["generation"]) == 1, run["pools"]
    assert "standalone_server_manager" in run["pools_from"]
    ups = check_trace(lines, recs, 3)
    assert [u["work"]["policy_age"] for u in ups] == [0, 1, 1]
    assert all(u["pools"]["generation"]["energy_j"] > 0 for u in ups)


def test_main_ppo_refuses_a_gpu_no_eerld_serves(tmp_path):
    # the job's three training workers hold three GPUs; eerld serves two
    p, recs, lines, _ = run_entry(tmp_path, "sync", 2, 2, ray_gpus=3, VERL_JOB_TRAIN_GPUS=3)
    assert p.returncode != 0
    assert "GPU 2 is not one eerl can reach" in p.stderr, p.stderr[-4000:]
    assert "verl's training workers" in p.stderr and "eerld at" in p.stderr
    # refused before the session opened: no trace, no step trained
    assert lines == [] and recs == []


@pytest.fixture
def node3(tmp_path, monkeypatch):
    """A 3-GPU stand-in NVML node (the tests' Ray instance declares 3 GPUs)."""
    from conftest import write_state
    path = write_state(tmp_path / "nvml3.json", n_gpus=3)
    monkeypatch.setenv("EERL_FAKE_NVML_STATE", path)
    return path


def with_job(opts, run, *worker_lists):
    """run.fit() with the entry's Job on verl's trainer classes, as in verl's TaskRunner; the
    stand-in GPU workers killed after."""
    import ray
    from eerl.integrations.verl import _job
    job = _job.Job(opts)
    job.patch()
    try:
        run.fit()
    finally:
        job.unpatch()
        job.close()
        for ws in worker_lists:
            for w in ws:
                ray.kill(w)
    return job


def test_the_entry_runs_the_legacy_trainer_on_its_workers_gpus(tq, node3, tmp_path):
    import verl_job
    from eerl import multinode
    run = verl_cpu.LegacyRun(steps=3)
    run.actor.workers = verl_job.gpu_workers(2)
    held = sorted(g for r in multinode.ray_worker_gpus(run.actor.workers) for g in r["gpus"])
    trace = str(tmp_path / "legacy.jsonl")
    job = with_job({"trace": trace, "strict": True}, run, run.actor.workers)
    assert job.opened == 1 and job.info["mode"] == "colocated"
    assert job.info["pools"] == {"generation": held, "training": held}
    ups = [json.loads(x) for x in open(trace) if '"update"' in x and '"work"' in x]
    assert [(u["work"]["G"], u["work"]["N"]) for u in ups] == \
        [(t["generated"], t["trained"]) for t in run.trained]
    assert read_locks(node3) == [(None, None)] * 3


def test_the_entry_runs_one_step_off_drained_on_its_rollout_replicas(tq, node3, tmp_path):
    import verl_job
    from eerl import multinode
    run = verl_cpu.OneStepOffRun(steps=3)
    run.actor.workers = verl_job.gpu_workers(2)
    rollout = verl_job.gpu_workers(1)
    run.trainer.llm_server_manager = verl_job.Servers(run.rollout, [verl_job.Replica(rollout)])
    gen = [g for r in multinode.ray_worker_gpus(rollout) for g in r["gpus"]]
    trace = str(tmp_path / "osop.jsonl")
    job = with_job({"trace": trace, "strict": True}, run, run.actor.workers, rollout)
    assert job.info["mode"] == "drained"
    assert job.info["pools"]["generation"] == gen and len(job.info["pools"]["training"]) == 2
    ups = [json.loads(x) for x in open(trace) if '"update"' in x and '"work"' in x]
    assert [u["work"]["N"] for u in ups] == [t["trained"] for t in run.trained]


def test_the_entry_refuses_a_pool_the_job_does_not_use(tq, node3, tmp_path):
    import verl_job
    run = verl_cpu.LegacyRun(steps=2)
    run.actor.workers = verl_job.gpu_workers(2)
    from eerl import multinode
    held = {g for r in multinode.ray_worker_gpus(run.actor.workers) for g in r["gpus"]}
    other = ({0, 1, 2} - held).pop()
    with pytest.raises(ValueError) as e:
        with_job({"pools": {"training": [other]}}, run, run.actor.workers)
    msg = str(e.value)
    assert "+eerl.pools.training names GPU %d, which the job does not use" % other in msg, msg
    assert run.trained == [] and read_locks(node3) == [(None, None)] * 3


def test_separate_async_with_its_hybrid_engine_is_refused_naming_the_setting(tq):
    from eerl.integrations.verl import _job
    run = verl_cpu.V1Run("separate_async", steps=1,
                         overrides=["actor_rollout_ref.hybrid_engine=True"])
    with pytest.raises(IntegrationError, match="actor_rollout_ref.hybrid_engine=False"):
        _job.mode_of(run.trainer)


def test_an_eerl_option_that_does_not_exist_is_refused_before_ray_starts(tmp_path, capfd,
                                                                          monkeypatch):
    from eerl.integrations.verl import main_ppo
    monkeypatch.chdir(tmp_path)
    started = []
    monkeypatch.setattr("ray.init", lambda *a, **k: started.append(1))
    with pytest.raises(SystemExit):  # Hydra reports the error and exits 1
        main_ppo.main(verl_cpu.overrides("sync", 1) + job_overrides(2) + ["+eerl.tarce=x"])
    err = capfd.readouterr().err
    assert "+eerl.tarce: eerl has no such option" in err and "+eerl.trace" in err, err
    assert started == []
    with pytest.raises(SystemExit):
        main_ppo.main(verl_cpu.overrides("sync", 1) + job_overrides(2) +
                      ["+eerl.mode=drained"])
    assert "the mode comes from verl's configuration" in capfd.readouterr().err


def test_the_entry_refuses_a_verl_whose_hook_points_moved(monkeypatch):
    from eerl.integrations.verl import main_ppo
    import verl.trainer.ppo.v1.trainer_base as tb
    import verl.trainer.main_ppo as vm
    monkeypatch.delattr(tb, "compute_data_metrics")
    with pytest.raises(IntegrationError) as e:
        main_ppo.main(["+eerl.trace=x"])
    assert "verl 0.9.1" in str(e.value) and "trainer_base.compute_data_metrics" in str(e.value)
    monkeypatch.undo()
    monkeypatch.delattr(vm, "run_ppo")
    with pytest.raises(IntegrationError, match="verl.trainer.main_ppo.run_ppo"):
        main_ppo.main([])
    monkeypatch.undo()
    monkeypatch.delattr(tb.PPOTrainer, "fit")
    with pytest.raises(IntegrationError, match="fit\\(\\) of verl's PPOTrainer"):
        main_ppo.main([])


@pytest.mark.parametrize("argv,runner", [([], "EerlTaskRunnerV1"),
                                         (["trainer.use_v1=False"], "EerlTaskRunner")],
                         ids=["v1", "legacy"])
def test_the_entry_runs_verls_own_main_with_its_task_runner(argv, runner, tmp_path, monkeypatch):
    """verl's main itself runs (its Hydra configuration, its choice of TaskRunner), handing
    run_ppo verl's TaskRunner with eerl on and the +eerl options as given."""
    import verl.trainer.main_ppo as vm
    from eerl.integrations.verl import _job, main_ppo
    monkeypatch.chdir(tmp_path)
    got = []
    monkeypatch.setattr(vm, "run_ppo", lambda config, task_runner_class: got.append(
        (config, task_runner_class)))
    main_ppo.main(verl_cpu.overrides("sync", 1) + job_overrides(2)[6:] + argv +
                  ["+eerl.trace=t.jsonl", "+eerl.observe_only=true"])
    (config, cls), = got
    assert cls.__ray_actor_class__.__name__ == runner
    assert _job.options(config) == {"trace": str(tmp_path / "t.jsonl"), "observe_only": True}
    assert getattr(vm.run_ppo, "__name__", "") == "<lambda>"  # verl's run_ppo given back


def test_the_entry_takes_a_session_across_nodes_when_verl_placed_workers_on_several(
        tmp_path, monkeypatch):
    """verl's workers on two nodes (their records as Ray gives them: node ids, GPU UUIDs): the
    entry opens a MultiNodeSession over an adapter reaching both nodes' eerlds, the pools found
    there by UUID; the trace names both nodes and every clock is back after fit()."""
    import socket
    import eerld_nodes
    from eerl import multinode
    from eerl.integrations.verl import _job
    nodes = eerld_nodes.start_nodes(tmp_path, 2)
    try:
        run = verl_cpu.LegacyRun(steps=3)
        run.actor.workers = ["w%d" % i for i in range(4)]  # handles, as verl holds them
        recs = [{"node_id": "node-%s" % "ab"[i // 2], "host": socket.gethostname(), "pid": i,
                 "rank": i, "gpus": [nodes[i // 2].uuids[i % 2]]} for i in range(4)]
        monkeypatch.setattr(multinode, "ray_worker_gpus", lambda actors: list(recs))
        monkeypatch.setattr(_job, "_here", lambda: "node-driver")
        made = []

        class Adapter(eerld_nodes.LocalAdapter, multinode._Adapter):
            pass

        def for_workers(*lists, **kw):
            assert [r["node_id"] for r in lists[0]] == [r["node_id"] for r in recs]
            made.append(Adapter([n.socket for n in nodes]))
            return made[-1]
        monkeypatch.setattr(multinode.RayAdapter, "for_workers", staticmethod(for_workers))
        trace = str(tmp_path / "nodes.jsonl")
        job = with_job({"trace": trace, "strict": True}, run)
        assert job.info == {"mode": "colocated", "nodes": 2,
                            "pools": {"generation": {0: [0, 1], 1: [0, 1]},
                                      "training": {0: [0, 1], 1: [0, 1]}}}
        lines = [json.loads(x) for x in open(trace)]
        run_line = [x for x in lines if x["type"] == "run"][0]
        assert run_line["gpu_uuids"] == {str(k): {str(g): u for g, u in enumerate(n.uuids)}
                                         for k, n in enumerate(nodes)}
        assert run_line["pools_from"].startswith("training: actor_rollout_wg.workers")
        ups = [x for x in lines if x["type"] == "update"]
        assert [u["work"]["N"] for u in ups] == [t["trained"] for t in run.trained]
        assert all(n.locks() == [(None, None)] * 2 for n in nodes)
    finally:
        for n in nodes:
            n.stop()
