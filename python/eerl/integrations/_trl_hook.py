"""The hook of a TRL trainer (eerl.integrations.trl's install() and EerlCallback put it in):
GRPOTrainer's here, AsyncGRPOTrainer's (mode "inflight") in _trl_async.py; check() and
make_hook() choose between them. trl.py and _trl_callback.py import this module, never the
other way.

Hook points, as found in the TRL release it is tested against (trl 1.16.0 from PyPI:
trl/extras/profiling.py, trl/trainer/grpo_trainer.py) and transformers' TrainerCallback:
  * Update boundaries: a TrainerCallback. on_step_begin (before the first micro-batch of an
    optimizer step) opens the update, on_step_end (after the optimizer step) ends it.
  * Phases: every TRL profiling block is a ProfilingContext named "<TrainerClass>.<name>"
    (profiling_context(self, name) and @profiling_decorator both build one). Its __enter__ and
    __exit__ are wrapped; by name:
        "transformers.generate", "transformers.generate_batch", "vLLM.generate" -> generation
        "rollout_func" (the trainer's rollout_func, wrapped by the hook)        -> generation
        "sync_weights"                                                          -> refit
        "_get_per_token_logps_and_entropies"                                    -> logprob
        "compute_loss"                                                          -> training
    Between on_step_begin and on_step_end, time outside those blocks is training (backward and
    the optimizer step run outside compute_loss), except inside "_prepare_inputs", where it is
    other (reward functions, tool calls, decoding). Log-prob calls inside compute_loss are
    training. A block entered while the model is in eval mode (trainer.evaluate(), eval_strategy)
    is no phase: its time is other and its tokens are not counted.
  * Work: the trainer's _generate_and_score_completions, wrapped on this trainer instance. After a
    train-mode call: N = the output's num_items_in_batch (TRL's loss mask, completion_mask x
    tool_mask, summed over every process), G = TRL's completions/mean_length x the number of
    completions over every process (tool-result tokens excluded, as TRL counts them), L = TRL's
    completions/max_length. These are TRL's own figures, already gathered across processes, so the
    hook needs no collective of its own and only the main process is hooked.
  With the default steps_per_generation (one generation per optimizer step) an eerl update is
  one optimizer step. When a generation is reused for several steps, the steps without a new
  generation are merged into the next update that has one.

Fails loudly (_common): check() refuses a TRL without these hook points; an update that ends
without a generation phase warns once (strict=True: raises), naming the TRL version and the
profiling blocks it saw instead.
"""

import importlib

from .. import _tested
from . import _trl_async
from ._common import Framework, PhaseDriver, numeric_metrics, phase_table

PHASES = {
    "transformers.generate": "generation",
    "transformers.generate_batch": "generation",
    "vLLM.generate": "generation",
    "rollout_func": "generation",  # the trainer's rollout_func, wrapped by the hook
    "sync_weights": "refit",
    "_get_per_token_logps_and_entropies": "logprob",
    "compute_loss": "training",
}
CONTAINERS = {"_prepare_inputs"}  # time inside, outside any mapped block, is "other"
TESTED = _tested.TESTED["trl"]
DOC = "docs/integrations/trl.md"


def _label(context_name):
    return context_name.split(".", 1)[1] if "." in context_name else context_name


def framework():
    """The Framework record of the installed TRL (for messages)."""
    return Framework("TRL", dist="trl", hooks="TRL's profiling blocks (ProfilingContext)",
                     tested=TESTED, doc=DOC)


class TRLHook:
    """The installed hook (install() returns it). updates: eerl updates ended; generations: the
    train-mode generations counted; eval_generations: the eval-mode ones left out."""

    def __init__(self, session, trainer, phases, strict, profiling, fw):
        self.session = session
        self.trainer = trainer
        self.phases = dict(phases)
        self.framework = fw
        self.driver = PhaseDriver(session, strict=strict, framework=fw, expect=("generation",))
        self.updates = 0
        self.generations = 0
        self.eval_generations = 0
        self._work = [0.0, 0.0, 0.0]  # G, N, L since the last update end
        self._in_step = False
        self._containers = 0
        self._profiling = profiling
        self._orig_enter = profiling.ProfilingContext.__enter__
        self._orig_exit = profiling.ProfilingContext.__exit__
        hook = self

        prefix = type(trainer).__name__ + "."  # this trainer's blocks, not another's

        def __enter__(ctx):
            r = hook._orig_enter(ctx)
            name = getattr(ctx, "name", "")
            if name.startswith(prefix):
                hook._enter(name)
            return r

        def __exit__(ctx, et, ev, tb):
            try:
                name = getattr(ctx, "name", "")
                if name.startswith(prefix):
                    hook._exit(name)
            except BaseException:
                hook._orig_exit(ctx, et, ev, tb)
                raise
            return hook._orig_exit(ctx, et, ev, tb)

        profiling.ProfilingContext.__enter__ = __enter__
        profiling.ProfilingContext.__exit__ = __exit__
        self._installed = (__enter__, __exit__)

        orig_gen = trainer._generate_and_score_completions
        self._orig_gen = orig_gen

        def _generate_and_score_completions(*args, **kwargs):
            train = hook._train_mode()
            out = orig_gen(*args, **kwargs)
            if train:
                hook._count(out)
            else:
                hook.eval_generations += 1
            return out

        trainer._generate_and_score_completions = _generate_and_score_completions
        self._orig_rollout = None
        if getattr(trainer, "rollout_func", None) is not None:
            orig_rollout = self._orig_rollout = trainer.rollout_func

            def rollout_func(*args, **kwargs):  # a custom rollout is generation, unprofiled
                hook._enter("rollout_func")
                try:
                    return orig_rollout(*args, **kwargs)
                finally:
                    hook._exit("rollout_func")

            trainer.rollout_func = rollout_func
        self.callback = None  # make_hook() sets it where the hook has a callback of its own

    # ---- phases ---------------------------------------------------------------------------------

    def _train_mode(self):
        model = getattr(self.trainer, "model", None)
        return bool(getattr(model, "training", True))

    def _enter(self, name):
        label = _label(name)
        if label in CONTAINERS:
            self._containers += 1
            self.driver.set_base(None)
        phase = self.phases.get(label)
        if phase is not None and not self._train_mode():
            phase = None  # evaluation: other time, no phase
            label = "eval:" + label
        self.driver.enter(label, phase)

    def _exit(self, name):
        label = _label(name)
        if not self.driver.exit(label):
            self.driver.exit("eval:" + label)
        if label in CONTAINERS and self._containers > 0:
            self._containers -= 1
            if self._containers == 0 and self._in_step:
                self.driver.set_base("training")

    def train_begin(self, kwargs):
        pass

    def train_end(self):
        self.driver.set_base(None)
        self.driver.close_all()

    def step_begin(self):
        self._in_step = True
        if self._containers == 0:
            self.driver.set_base("training")

    def step_end(self):
        self._in_step = False
        self.driver.set_base(None)
        self.driver.close_all()
        G, N, L = self._work
        if N <= 0:
            return  # no new generation this step: merged into the next update
        self._work = [0.0, 0.0, 0.0]
        r = self.driver.update_end(generated_tokens=G, valid_tokens=N, longest_response=L,
                                   policy_version=None)
        if r is not None:
            self.updates += 1
            # TRL averages its _metrics lists into each log entry (and the reporters it feeds).
            train = self.trainer._metrics["train"]
            for k, v in numeric_metrics(self.session).items():
                train.setdefault(k, []).append(float(v))

    # ---- work -----------------------------------------------------------------------------------

    def _count(self, out):
        t = self.trainer
        N = float(out["num_items_in_batch"])
        try:
            m = t._metrics["train"]
            mean = float(m["completions/mean_length"][-1])
            longest = float(m["completions/max_length"][-1])
            count = int(out["completion_ids"].shape[0])
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            # A TRL that logs its completion lengths under other names: G = N, L from this
            # process's mask, and say so once.
            self.driver.warn_once(
                "eerl: %s logged no completions/mean_length or completions/max_length for a "
                "generation (%s: %s): G is taken as N and L as this process's longest completion. "
                "%s" % (self.framework, type(e).__name__, e, self.framework._known()))
            mask = out["completion_mask"]
            self._work[0] += N
            self._work[1] += N
            self._work[2] = max(self._work[2], float(mask.sum(-1).max()) if mask.numel() else 0.0)
            self.generations += 1
            return
        procs = int(getattr(getattr(t, "accelerator", None), "num_processes", 1) or 1)
        # mean_length is a float32 mean of integers: exact below 2**23 tokens per generation.
        G = float(round(mean * count * procs))
        self._work[0] += max(G, N)
        self._work[1] += N
        self._work[2] = max(self._work[2], longest)
        self.generations += 1

    def metrics(self):
        return numeric_metrics(self.session)

    def uninstall(self):
        """Puts TRL's ProfilingContext and the trainer back (only what is still ours) and ends
        any open phase."""
        p = self._profiling.ProfilingContext
        if p.__enter__ is self._installed[0]:
            p.__enter__ = self._orig_enter
        if p.__exit__ is self._installed[1]:
            p.__exit__ = self._orig_exit
        if "_generate_and_score_completions" in vars(self.trainer):
            del self.trainer._generate_and_score_completions
        if self._orig_rollout is not None:
            self.trainer.rollout_func = self._orig_rollout
        remove = getattr(self.trainer, "remove_callback", None)
        if remove is not None and self.callback is not None:
            remove(self.callback)
        self.driver.set_base(None)
        self.driver.close_all()


def _make_callback(hook):
    transformers = importlib.import_module("transformers")

    class EerlCallback(transformers.TrainerCallback):
        """Update boundaries for eerl."""

        def on_step_begin(self, args, state, control, **kwargs):
            hook.step_begin()

        def on_step_end(self, args, state, control, **kwargs):
            hook.step_end()

        def on_train_end(self, args, state, control, **kwargs):
            hook.train_end()

    return EerlCallback()


def is_async(trainer):
    """Whether trainer is TRL's AsyncGRPOTrainer (or a subclass of it)."""
    return any(c.__name__ == "AsyncGRPOTrainer" for c in type(trainer).__mro__)


def _profiling(fw, profiling_module=None):
    if profiling_module is None:
        try:
            profiling_module = importlib.import_module("trl.extras.profiling")
        except ImportError as e:
            fw.refuse(["trl.extras.profiling (%s)" % e])
    pc = getattr(profiling_module, "ProfilingContext", None)
    fw.require({
        "%s.ProfilingContext" % profiling_module.__name__: pc is not None and hasattr(
            pc, "__enter__") and hasattr(pc, "__exit__"),
    })
    return profiling_module


def check(trainer, fw=None, profiling_module=None):
    """Refuses (IntegrationError naming TRL's version and every missing hook point) a trainer
    whose hook points are not where this integration looks for them. Returns the profiling
    module (GRPOTrainer) or None (AsyncGRPOTrainer). Checks nothing that differs between
    processes, so every process of a job reaches the same verdict."""
    fw = fw or framework()
    if is_async(trainer):
        _trl_async.check(trainer, fw)
        return None
    profiling_module = _profiling(fw, profiling_module)
    cls = type(trainer).__name__
    fw.require({
        "%s._generate_and_score_completions" % cls: callable(
            getattr(trainer, "_generate_and_score_completions", None)),
        "%s.add_callback" % cls: callable(getattr(trainer, "add_callback", None)),
        "%s._metrics['train'] (its completion-length figures)" % cls: isinstance(
            getattr(trainer, "_metrics", None), dict) and "train" in trainer._metrics,
        "a profiled %s._prepare_inputs" % cls: hasattr(
            getattr(type(trainer), "_prepare_inputs", None), "__wrapped__"),
    })
    return profiling_module


def make_hook(session, trainer, phases, strict, profiling_module, fw, callback):
    """The hook of trainer for session, AsyncGRPOTrainer's or GRPOTrainer's (phases: overrides
    of PHASES, GRPOTrainer only). callback: the hook's update boundaries come from a
    TrainerCallback of its own, added to the trainer (install()); EerlCallback, which is that
    callback itself, passes False."""
    if is_async(trainer):
        h = _trl_async.AsyncHook(session, trainer, strict, fw)
    else:
        h = TRLHook(session, trainer, phase_table(PHASES, phases), strict, profiling_module, fw)
    if callback:
        h.callback = _make_callback(h)
        trainer.add_callback(h.callback)
    return h
