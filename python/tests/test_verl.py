"""The verl hook against the installed verl (0.9.1 from PyPI): verl's own trainer code runs on the
CPU, only what runs on GPUs in a real job is replaced (python/tests/verl_cpu.py: the rollout
engine with its agent loop, the actor/ref worker group, the weight sync). The v1 trainers run
on a real TransferQueue over a local Ray instance, as verl's own *_on_cpu tests do.

Checked per step: the phases eerl saw, G (the mask rollout produced), N (what the actor was handed
to train on), L, the policy age from the batch's tags, eerl's figures in what verl logged; then
a real eerl.Session on the stand-in NVML node, bad input (missing / renamed hook points) and
uninstall."""

import json
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
