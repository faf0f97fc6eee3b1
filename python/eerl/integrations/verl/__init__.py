"""eerl for verl's PPO/GRPO trainers, without a fork (docs/integrations/verl.md).

In the process that runs the trainer's fit() (verl's TaskRunner actor, the single controller):

    import eerl
    from eerl.integrations import verl as eerl_verl
    session = eerl.Session(mode="colocated", pools={"generation": [0, 1, 2, 3, 4, 5, 6, 7],
                                                    "training": [0, 1, 2, 3, 4, 5, 6, 7]},
                           trace="eerl-run.jsonl")
    hook = eerl_verl.install(session)
    try:
        trainer.fit(...)
    finally:
        hook.uninstall(); session.close()

Hook points, as found in the verl release it is tested against (verl 0.9.1 from PyPI):
  * marked_timer(name, timing_raw, ...), defined in verl.utils.profiler and re-exported by
    verl.utils.debug, is imported by name into every trainer module: the v1 trainers
    (verl/trainer/ppo/v1/trainer_base.py, trainer_sync.py, trainer_colocate_async.py,
    trainer_separate_async.py), the legacy verl/trainer/ppo/ray_trainer.py and the recipes
    under verl/experimental (separation, one_step_off_policy, fully_async_policy). install()
    imports those that import cleanly, then replaces the name in every loaded module that holds
    verl's own function (and in the defining modules, so a module imported later binds the
    wrapper too). By stage name:
        "gen"                                     -> generation (see the modes below)
        "generate_async"                          -> generation, generation pool (one-step-off)
        "old_log_prob", "ref", "values"           -> logprob   (training clock)
        "update_actor", "update_critic"           -> training
        "update_weights", "sync_rollout_weights",
        "timing_s/param_sync"                     -> refit
    Anything else ("step", "reward", "adv", "testing", "save_checkpoint", "switch_*", ...) is
    eerl's "other" time. Only the outermost mapped stage of the trainer's stack is a phase.
  * compute_data_metrics(batch, use_critic) from verl.trainer.ppo.metric_utils, replaced the same
    way: called once per step with the step's batch; it ends the eerl update with
        N = batch.batch["response_mask"].sum()  (the tokens the loss uses),
        G = the response_mask as rollout produced it (before rollout correction masked tokens
            out: compute_rollout_correction_and_add_to_batch is wrapped to record it), else N,
        L = the longest response in that mask,
    and adds eerl's figures ("eerl/...") to the metrics verl logs.
  * Policy version: from the batch's own tags, the weights version each trajectory was generated
    under (min_global_steps; v1: KVBatchMeta.tags, recorded by wrapping
    PPOTrainer._compute_metrics; the others: batch.non_tensor_batch["min_global_steps"]), the
    oldest of the batch. Its age is the trainer's version (global_steps - 1; one-step-off labels
    weights before training them; fully_async: current_param_version before the step's sync)
    minus that; eerl gets update - age.

Modes (the session's mode says which schedule runs):
  * "colocated" (v1 sync and colocate_async, the legacy trainer; one pool): the stages as mapped.
  * "drained" (v1 separate_async with actor_rollout_ref.hybrid_engine=False, one_step_off_policy,
    fully_async_policy; rollout on a pool of its own): "gen" is the trainer waiting for samples
    (no phase). With a "generate_async" stage (one-step-off) the generation pool generates while
    that stage runs; otherwise it generates throughout, except during a refit (verl's checkpoint
    engine aborts rollout for a weight update and resumes it after).
  * "disaggregated" and "inflight" are refused: verl 0.9.1 runs no such schedule (the legacy
    trainer asserts its hybrid engine; rollout never goes on during a weight update).

Fails loudly (_common): install() refuses a verl without these hook points (naming each and
the installed version); an update with no phase, or without a generation phase, warns once
(strict=True: raises IntegrationError), listing the stage names seen; a step that starts before
the previous step's compute_data_metrics ended an update warns (or raises) the same way.
"""

import importlib
import sys
import threading
import warnings

from ... import _tested
from .._common import Framework, IntegrationError, PhaseDriver, numeric_metrics, phase_table

PHASES = {
    "gen": "generation",
    "generate_async": "generation",
    "old_log_prob": "logprob",
    "ref": "logprob",
    "values": "logprob",
    "update_actor": "training",
    "update_critic": "training",
    "update_weights": "refit",
    "sync_rollout_weights": "refit",
    "timing_s/param_sync": "refit",
}
GENERATION_POOL_STAGES = {"generate_async"}  # run by the rollout pool beside the trainer's stack
# Trainers whose rollout generates one batch at a time (in GENERATION_POOL_STAGES), not throughout
DISCRETE_GENERATION = {"verl.experimental.one_step_off_policy.ray_trainer"}
# Trainers that label the weights they send before training a step with that step's number
# (one-step-off: update_weights(global_steps) runs before the step trains; 0 is the initial push)
LABEL_BEFORE_TRAINING = ("OneStepOffRayTrainer",)
TESTED = _tested.TESTED["verl"]
DOC = "docs/integrations/verl.md"

# Where verl defines what is hooked (the defining modules are patched too).
TIMER_SOURCES = ("verl.utils.profiler.performance", "verl.utils.profiler", "verl.utils.debug")
METRICS_SOURCE = "verl.trainer.ppo.metric_utils"
CORRECTION_SOURCE = "verl.trainer.ppo.rollout_corr_helper"
# The trainers: each must hold verl's marked_timer and, where named, compute_data_metrics.
TRAINERS = {
    "verl.trainer.ppo.v1.trainer_base": ("marked_timer", "compute_data_metrics"),
    "verl.trainer.ppo.v1.trainer_sync": ("marked_timer",),
    "verl.trainer.ppo.v1.trainer_colocate_async": ("marked_timer",),
    "verl.trainer.ppo.v1.trainer_separate_async": ("marked_timer",),
    "verl.trainer.ppo.ray_trainer": ("marked_timer", "compute_data_metrics"),
}
RECIPES = {  # hooked where they import (they need more of verl's optional dependencies)
    "verl.experimental.separation.ray_trainer": ("marked_timer", "compute_data_metrics"),
    "verl.experimental.one_step_off_policy.ray_trainer": ("marked_timer",),
    "verl.experimental.fully_async_policy.fully_async_trainer": ("marked_timer",),
}
V1_BASE = "verl.trainer.ppo.v1.trainer_base"
MODES = ("colocated", "drained")
MODES_REFUSED = {
    "disaggregated": "generation and training on separate pools one after the other would need "
                     "the legacy trainer without its hybrid engine, which it asserts; separate "
                     "pools run asynchronously there (v1 separate_async with "
                     "actor_rollout_ref.hybrid_engine=False, one_step_off_policy, "
                     "fully_async_policy): use mode=\"drained\"",
    "inflight": "its checkpoint engine aborts rollout for every weight update and resumes it "
                "after, so rollout does not go on during a refit: use mode=\"drained\"",
}


def framework():
    """The Framework record of the installed verl (for messages)."""
    return Framework("verl", dist="verl", hooks="verl's marked_timer stages", tested=TESTED,
                     doc=DOC)


def _mask_counts(mask):
    """(total, longest) of a [batch, response_len] 0/1 mask (torch)."""
    if mask is None or mask.numel() == 0:
        return 0.0, 0.0
    lengths = mask.sum(-1)
    return float(lengths.sum()), float(lengths.max())


def _oldest(values):
    vs = [int(v) for v in values if v is not None]
    return min(vs) if vs else None


class VerlHook:
    """The installed hook (install() returns it). modules: the modules whose marked_timer /
    compute_data_metrics it replaced; skipped: {recipe module: why it was not imported};
    updates: eerl updates ended; driver: the PhaseDriver (errors, blind_updates)."""

    def __init__(self, session, phases, strict, log_metrics, fw):
        self.session = session
        self.phases = dict(phases)
        self.framework = fw
        self.strict = strict
        self.log_metrics = log_metrics
        self.mode = getattr(session, "mode", "colocated")
        self.asynchronous = self.mode == "drained"
        # Every synchronous step generates; asynchronous rollout may not produce within a step
        # (one-step-off's last step), while the trainer always trains.
        expect = ("training",) if self.asynchronous else ("generation",)
        self.driver = PhaseDriver(session, strict=strict, framework=fw, expect=expect)
        self.updates = 0
        self.modules = []
        self.skipped = {}
        self._lock = threading.RLock()
        self._patches = []  # (owner, attribute, original, replacement)
        self._gen_open = 0  # generate_async stages open (generation pool)
        self._discrete = False  # a generate_async stage was seen: generation follows it
        self._continuous_on = False
        self._continuous_paused = False
        self._started = False
        self._step_phases = False  # a phase ran since the last update end
        self._corrected = None  # (G, L) of the masks before rollout correction, this update
        self._v1 = None  # (tags, global_steps) of the v1 batch being reported

    # ---- patching ---------------------------------------------------------------------------

    def _patch(self, owner, attr, replacement):
        orig = getattr(owner, attr)
        setattr(owner, attr, replacement)
        self._patches.append((owner, attr, orig, replacement))

    def _patch_everywhere(self, attr, originals, make, sources):
        """Replaces attr wherever a loaded module holds one of originals with make(module name);
        returns the module names (the defining modules, sources, left out)."""
        names = []
        for name, mod in list(sys.modules.items()):
            d = getattr(mod, "__dict__", None)
            if not isinstance(d, dict):
                continue
            v = d.get(attr)
            if v is None or not any(v is o for o in originals):
                continue
            self._patch(mod, attr, make(name))
            if name not in sources:
                names.append(name)
        return names

    def uninstall(self):
        """Puts verl's functions back (only where they are still ours) and ends open phases."""
        with self._lock:
            for owner, attr, orig, repl in reversed(self._patches):
                if getattr(owner, attr, None) is repl:
                    setattr(owner, attr, orig)
            self._patches = []
            self._generation(False)
            self.driver.close_all()

    # ---- the generation pool ------------------------------------------------------------------

    def _generation(self, on):
        """The generation pool's generation phase (separate pools only)."""
        if on and not self._continuous_on:
            self.driver.call(self.session.phase_begin, "generation", "generation")
            self._continuous_on = True
        elif not on and self._continuous_on:
            self.driver.call(self.session.phase_end, "generation", "generation")
            self._continuous_on = False
        if on:
            self.driver.saw("generation")

    def _generation_wanted(self):
        if self._discrete:
            return self._gen_open > 0
        return self.asynchronous and self._started and not self._continuous_paused

    def _sync_generation(self):
        self._generation(self._generation_wanted())

    # ---- stages -------------------------------------------------------------------------------

    def _enter(self, name, module=None):
        label = str(name)
        with self._lock:
            phase = self.phases.get(label)
            if label == "step":
                if module in DISCRETE_GENERATION:
                    self._discrete = True
                self._step_start()
            if phase is not None:
                self._step_phases = True
            if phase == "generation" and label in GENERATION_POOL_STAGES:
                if not self._discrete:
                    self._discrete = True
                self._gen_open += 1
                self._sync_generation()
                return
            if phase == "generation" and self.asynchronous:
                phase = None  # the trainer waits for rollout's samples: not a phase of its own
            if phase == "refit" and self.asynchronous:
                self._continuous_paused = True  # verl's checkpoint engine aborts rollout for it
                self._sync_generation()
            self.driver.enter(label, phase)

    def _exit(self, name):
        label = str(name)
        with self._lock:
            phase = self.phases.get(label)
            if phase == "generation" and label in GENERATION_POOL_STAGES:
                self._gen_open = max(0, self._gen_open - 1)
                self._sync_generation()
                return
            self.driver.exit(label)
            if phase == "refit" and self.asynchronous and self._continuous_paused:
                self._continuous_paused = False
                self._sync_generation()

    def _step_start(self):
        if not self._started:
            self._started = True
            self._sync_generation()
            return
        if self._step_phases:
            # The previous step ran phases but no compute_data_metrics ended its update.
            self._step_phases = False
            self.driver.close_all()
            self.driver._update_seen = set()
            msg = ("eerl: %s: a step began before the previous step's compute_data_metrics ended "
                   "its eerl update, so that step's work was not counted (is "
                   "compute_data_metrics still called by this trainer?). %s"
                   % (self.framework, self.framework._known()))
            self.driver.blind_updates += 1
            if self.strict:
                raise IntegrationError(msg, self.framework.name, self.framework.version,
                                       ["compute_data_metrics"])
            key = ("no-update-end",)
            if key not in self.driver._seen:
                self.driver._seen.add(key)
                warnings.warn(msg + " (warned once)", RuntimeWarning, stacklevel=4)

    # ---- work ---------------------------------------------------------------------------------

    def _correction(self, batch):
        mask = batch.batch["response_mask"]
        g, l = _mask_counts(mask)
        with self._lock:
            pg, pl = self._corrected or (0.0, 0.0)
            self._corrected = (pg + g, max(pl, l))

    def _versions(self, batch, caller):
        """The policy age of the batch (trainer's version - the oldest trajectory's), or None
        when the batch carries no version tags or they are ahead of the trainer."""
        if self._v1 is not None:
            tags, steps = self._v1
            oldest = _oldest(t.get("min_global_steps") for t in tags
                             if not t.get("is_padding", False))
            current = None if steps is None else int(steps) - 1
        else:
            nt = getattr(batch, "non_tensor_batch", None) or {}
            col = nt.get("min_global_steps")
            oldest = None if col is None else _oldest(list(col))
            trainer = caller.f_locals.get("self") if caller is not None else None
            current = getattr(trainer, "current_param_version", None)
            if current is not None:
                # fully_async reports after _fit_update_local_step: a step that ended a sync
                # cycle (local_trigger_step back at 1) has already counted the new version
                if getattr(trainer, "local_trigger_step", None) == 1:
                    current = int(current) - 1
            else:
                steps = getattr(trainer, "global_steps", None)
                current = None if steps is None else int(steps) - 1
                if oldest is not None and any(c.__name__ in LABEL_BEFORE_TRAINING
                                              for c in type(trainer).__mro__):
                    oldest = max(int(oldest), 1) - 1  # label v: the weights after v-1 steps
        if oldest is None or current is None or current < oldest:
            return None
        return current - oldest

    def _update_end(self, batch, caller):
        N, L = _mask_counts(batch.batch["response_mask"])
        age = self._versions(batch, caller)
        with self._lock:
            G, Lg = self._corrected if self._corrected is not None else (N, L)
            self._corrected = None
            self._v1 = None
            self._step_phases = False
            gen_was_on = self._continuous_on
            self._generation(False)
            version = None
            if age is not None:
                done = getattr(self.session, "_update", self.updates)
                version = int(done) - age
            r = None
            if N > 0:
                r = self.driver.update_end(generated_tokens=G, valid_tokens=N,
                                           longest_response=max(L, Lg), policy_version=version)
            else:
                self.driver.close_all()
            if gen_was_on:
                self._sync_generation()
            if r is None:
                return {}
            self.updates += 1
            return numeric_metrics(self.session)


def _check_mode(fw, mode):
    if mode not in MODES:
        raise IntegrationError(
            "eerl: %s runs no schedule that is a %r session: %s. %s"
            % (fw, mode, MODES_REFUSED.get(mode, "the modes it runs are %s" % ", ".join(MODES)),
               fw._known()), fw.name, fw.version, [mode])


def _hook_points(fw):
    """Imports verl's trainer modules and checks that each holds verl's own hook points. Returns
    {"mods": {module name: module}, "timers": verl's marked_timer functions, "metrics":
    compute_data_metrics, "base": the v1 PPOTrainer}; IntegrationError naming each one absent."""
    mods = {}
    for name in (METRICS_SOURCE, CORRECTION_SOURCE) + TIMER_SOURCES + tuple(TRAINERS):
        try:
            mods[name] = importlib.import_module(name)
        except ImportError as e:
            fw.refuse(["%s (%s)" % (name, e)], what="cannot import")
    timers = []
    for name in TIMER_SOURCES:
        t = getattr(mods[name], "marked_timer", None)
        if t is not None and not any(t is o for o in timers):
            timers.append(t)
    need = {"%s.marked_timer" % n: hasattr(mods[n], "marked_timer") for n in TIMER_SOURCES}
    need["%s.compute_data_metrics" % METRICS_SOURCE] = hasattr(mods[METRICS_SOURCE],
                                                                "compute_data_metrics")
    fw.require(need)
    metrics_fn = mods[METRICS_SOURCE].compute_data_metrics
    held = {}
    for name, attrs in TRAINERS.items():
        for attr in attrs:
            v = getattr(mods[name], attr, None)
            ok = v is metrics_fn if attr == "compute_data_metrics" else any(v is t for t in timers)
            what = "%s.%s" % (name, attr)
            if v is not None and not ok:
                what += (" from verl (it holds %s.%s instead: another hook, or an eerl hook not "
                         "uninstalled)" % (getattr(v, "__module__", "?"),
                                           getattr(v, "__qualname__", type(v).__name__)))
            held[what] = ok
    base = getattr(mods[V1_BASE], "PPOTrainer", None)
    held["%s.PPOTrainer._compute_metrics" % V1_BASE] = hasattr(base, "_compute_metrics")
    fw.require(held)
    return {"mods": mods, "timers": timers, "metrics": metrics_fn, "base": base}


def _recipes(fw):
    """The recipes' modules that import ({name: module}) and why the others did not ({name:
    why}); IntegrationError naming a hook point a recipe that imports lacks."""
    got, skipped = {}, {}
    for name, attrs in RECIPES.items():
        try:
            m = importlib.import_module(name)
        except Exception as e:  # a recipe whose optional dependencies are absent
            skipped[name] = "%s: %s" % (type(e).__name__, e)
            continue
        missing = [a for a in attrs if not hasattr(m, a)]
        if missing:
            fw.refuse(["%s.%s" % (name, a) for a in missing])
        got[name] = m
    return got, skipped


def check(mode=None):
    """What install() checks, hooking nothing: IntegrationError naming verl's version and each
    hook point it lacks (or mode, when verl runs no such schedule). Returns the recipes that did
    not import ({module: why})."""
    fw = framework()
    if mode is not None:
        _check_mode(fw, mode)
    _hook_points(fw)
    return _recipes(fw)[1]


class _Timer:
    """verl's marked_timer context, which also begins and ends the hook's phases."""
    __slots__ = ("hook", "name", "inner", "module")

    def __init__(self, hook, name, inner, module):
        self.hook, self.name, self.inner, self.module = hook, name, inner, module

    def __enter__(self):
        r = self.inner.__enter__()
        self.hook._enter(self.name, self.module)
        return r

    def __exit__(self, et, ev, tb):
        try:
            self.hook._exit(self.name)
        except BaseException:
            self.inner.__exit__(et, ev, tb)
            raise
        return self.inner.__exit__(et, ev, tb)


def _wrappers(hook, points):
    """The functions install() puts in place of verl's: {attribute: (originals, make(module))}
    for the module-level ones, and the v1 PPOTrainer._compute_metrics replacement."""
    metrics_fn = points["metrics"]

    def make_timer(orig):
        def make(module):
            def marked_timer(name, timing_raw, *args, **kwargs):
                return _Timer(hook, name, orig(name, timing_raw, *args, **kwargs), module)
            marked_timer.__wrapped__ = orig
            return marked_timer
        return make

    def compute_data_metrics(batch, *args, **kwargs):
        out = metrics_fn(batch, *args, **kwargs)
        extra = hook._update_end(batch, sys._getframe(1))
        if extra and hook.log_metrics:
            out = dict(out)
            out.update(extra)
        return out
    compute_data_metrics.__wrapped__ = metrics_fn

    corr_fn = getattr(points["mods"][CORRECTION_SOURCE],
                      "compute_rollout_correction_and_add_to_batch", None)

    def compute_rollout_correction_and_add_to_batch(batch, *args, **kwargs):
        hook._correction(batch)
        return corr_fn(batch, *args, **kwargs)
    compute_rollout_correction_and_add_to_batch.__wrapped__ = corr_fn

    orig_compute_metrics = points["base"]._compute_metrics

    def _compute_metrics(self, batch, *args, **kwargs):
        steps = kwargs.get("global_steps", args[2] if len(args) > 2 else None)
        with hook._lock:
            hook._v1 = (list(getattr(batch, "tags", None) or []), steps)
        try:
            return orig_compute_metrics(self, batch, *args, **kwargs)
        finally:
            hook._v1 = None
    _compute_metrics.__wrapped__ = orig_compute_metrics

    fns = [("marked_timer", [t], make_timer(t), True) for t in points["timers"]]
    fns.append(("compute_data_metrics", [metrics_fn], lambda m: compute_data_metrics, True))
    if corr_fn is not None:
        fns.append(("compute_rollout_correction_and_add_to_batch", [corr_fn],
                    lambda m: compute_rollout_correction_and_add_to_batch, False))
    return fns, _compute_metrics


def install(session, phases=None, strict=False, log_metrics=True):
    """Hooks every loaded verl trainer for session (see the module's docstring). phases:
    overrides of the stage-name -> eerl phase map (a value of None drops a name). strict: eerl
    errors and an update without phases stop the run. log_metrics: add eerl's figures to what verl
    logs. Raises IntegrationError when verl lacks a hook point."""
    fw = framework()
    _check_mode(fw, getattr(session, "mode", "colocated"))
    points = _hook_points(fw)
    hook = VerlHook(session, phase_table(PHASES, phases), strict, log_metrics, fw)
    hook.skipped = _recipes(fw)[1]
    fns, compute_metrics = _wrappers(hook, points)
    sources = set(TIMER_SOURCES) | {METRICS_SOURCE, CORRECTION_SOURCE}
    with hook._lock:
        for attr, originals, make, counted in fns:
            names = hook._patch_everywhere(attr, originals, make, sources if counted else set())
            if counted:
                hook.modules += names
        hook._patch(points["base"], "_compute_metrics", compute_metrics)
    hook.modules = sorted(set(hook.modules))
    return hook
