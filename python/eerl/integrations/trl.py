"""eerl for TRL's GRPOTrainer, without a fork (docs/integrations/trl.md).

    import eerl
    from eerl.integrations import trl as eerl_trl
    session = eerl.Session(mode="colocated", pools={"generation": [0], "training": [0]},
                           trace="eerl-run.jsonl")
    trainer = GRPOTrainer(...)
    hook = eerl_trl.install(session, trainer)       # adds a TrainerCallback, hooks profiling
    trainer.train()
    hook.uninstall(); session.close()

Hook points, as found in TRL (huggingface/trl: trl/extras/profiling.py at commit
2400ef4e1a76f4698ea16071f247d60ad1ad1716, trl/trainer/grpo_trainer.py at
000bb3dbb6e3bd0288068c5ad73bb11e4f69dca1 and the "transformers.generate" context of later
versions) and transformers' TrainerCallback:
  * Update boundaries: a TrainerCallback. on_step_begin opens the update (the first micro-batch
    of an optimizer step), on_step_end (after the optimizer step) ends it.
  * Phases: every TRL profiling block is a ProfilingContext named "<TrainerClass>.<name>"
    (profiling_context(self, name) and @profiling_decorator both build one). Its __enter__ and
    __exit__ are wrapped; by name:
        "vLLM.generate", "transformers.generate", "remote_generate" -> generation
        "_move_model_to_vllm", "_sync_weights", "weight_sync"       -> refit
        "_get_per_token_logps", "_get_per_token_logps_and_entropies" -> logprob
        "compute_loss"                                               -> training
    Between on_step_begin and on_step_end, time outside those blocks is training (backward and
    the optimizer step run outside compute_loss), except inside "_prepare_inputs", where it is
    other (reward functions, decoding). The log-prob calls inside compute_loss are training.
  * Work: the trainer's _generate_and_score_completions is wrapped (on this trainer instance);
    from its output N = completion_mask.sum() (the loss mask), G = generated tokens
    (completion_ids that are not padding, at least N), L = the longest completion. With several
    processes each process's counts are summed with accelerator.gather (install the hook in
    every process; pass session=None where there is no session).
  With the default steps_per_generation (one generation per optimizer step) an eerl update is
  one optimizer step. When a generation is reused for several steps, the steps without a new
  generation are merged into the next update that has one.

Not run against TRL itself (it cannot be installed on the build machine): tested against
python/tests/stubs/trl and stubs/transformers, stand-ins with the same class names, signatures
and callback order.
"""

import importlib

from ._common import PhaseDriver, numeric_metrics

PHASES = {
    "vLLM.generate": "generation",
    "transformers.generate": "generation",
    "remote_generate": "generation",
    "_move_model_to_vllm": "refit",
    "_sync_weights": "refit",
    "weight_sync": "refit",
    "_get_per_token_logps": "logprob",
    "_get_per_token_logps_and_entropies": "logprob",
    "compute_loss": "training",
}
CONTAINERS = {"_prepare_inputs"}  # time inside, outside any mapped block, is "other"


def _label(context_name):
    return context_name.split(".", 1)[1] if "." in context_name else context_name


class TRLHook:
    def __init__(self, session, trainer, phases, strict, profiling):
        self.session = session
        self.trainer = trainer
        self.phases = dict(phases)
        self.driver = PhaseDriver(session, strict=strict) if session is not None else None
        self.updates = 0
        self.generations = 0
        self._work = [0.0, 0.0, 0.0]  # G, N, L since the last update end
        self._in_step = False
        self._containers = 0
        self._profiling = profiling
        self._orig_enter = profiling.ProfilingContext.__enter__
        self._orig_exit = profiling.ProfilingContext.__exit__
        hook = self

        def __enter__(ctx):
            r = hook._orig_enter(ctx)
            hook._enter(getattr(ctx, "name", ""))
            return r

        def __exit__(ctx, et, ev, tb):
            try:
                hook._exit(getattr(ctx, "name", ""))
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
            out = orig_gen(*args, **kwargs)
            hook._count(out)
            return out

        trainer._generate_and_score_completions = _generate_and_score_completions
        self.callback = _make_callback(self)
        trainer.add_callback(self.callback)

    # ---- phases ---------------------------------------------------------------------------------

    def _enter(self, name):
        if self.driver is None:
            return
        label = _label(name)
        if label in CONTAINERS:
            self._containers += 1
            self.driver.set_base(None)
        self.driver.enter(label, self.phases.get(label))

    def _exit(self, name):
        if self.driver is None:
            return
        label = _label(name)
        self.driver.exit(label)
        if label in CONTAINERS and self._containers > 0:
            self._containers -= 1
            if self._containers == 0 and self._in_step:
                self.driver.set_base("training")

    def step_begin(self):
        self._in_step = True
        if self.driver is not None and self._containers == 0:
            self.driver.set_base("training")

    def step_end(self):
        self._in_step = False
        if self.driver is None:
            return
        self.driver.set_base(None)
        self.driver.close_all()
        G, N, L = self._work
        if N <= 0:
            return  # no new generation this step: merged into the next update
        self._work = [0.0, 0.0, 0.0]
        r = self.driver.call(self.session.update_end, generated_tokens=G, valid_tokens=N,
                             longest_response=L, policy_version=None)
        if r is not None:
            self.updates += 1

    # ---- work -----------------------------------------------------------------------------------

    def _count(self, out):
        mask = out["completion_mask"]
        ids = out.get("completion_ids")
        pad = _pad_id(self.trainer)
        n_row = mask.sum(-1)
        if ids is not None and pad is not None and hasattr(ids, "shape"):
            g_row = (ids != pad).sum(-1)
            g_row = g_row.maximum(n_row) if hasattr(g_row, "maximum") else g_row
        else:
            g_row = n_row
        acc = getattr(self.trainer, "accelerator", None)
        if acc is not None and getattr(acc, "num_processes", 1) > 1:
            n_row, g_row = acc.gather(n_row), acc.gather(g_row)
        self._work[0] += float(g_row.sum())
        self._work[1] += float(n_row.sum())
        self._work[2] = max(self._work[2], float(g_row.max()) if g_row.numel() else 0.0)
        self.generations += 1

    def metrics(self):
        return numeric_metrics(self.session) if self.session is not None else {}

    def uninstall(self):
        p = self._profiling.ProfilingContext
        if p.__enter__ is self._installed[0]:
            p.__enter__ = self._orig_enter
        if p.__exit__ is self._installed[1]:
            p.__exit__ = self._orig_exit
        if "_generate_and_score_completions" in vars(self.trainer):
            del self.trainer._generate_and_score_completions
        remove = getattr(self.trainer, "remove_callback", None)
        if remove is not None:
            remove(self.callback)
        if self.driver is not None:
            self.driver.set_base(None)
            self.driver.close_all()


def _pad_id(trainer):
    pc = getattr(trainer, "processing_class", None)
    tok = getattr(pc, "tokenizer", pc)
    return getattr(tok, "pad_token_id", None)


def _make_callback(hook):
    transformers = importlib.import_module("transformers")

    class EerlCallback(transformers.TrainerCallback):
        """Update boundaries for eerl, and eerl's figures in the trainer's logs."""

        def on_step_begin(self, args, state, control, **kwargs):
            hook.step_begin()

        def on_step_end(self, args, state, control, **kwargs):
            hook.step_end()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs is not None and hook.updates:
                logs.update(hook.metrics())

        def on_train_end(self, args, state, control, **kwargs):
            if hook.driver is not None:
                hook.driver.set_base(None)
                hook.driver.close_all()

    return EerlCallback()


def install(session, trainer, phases=None, strict=False, profiling_module=None):
    """Hooks trainer (a TRL GRPOTrainer) and TRL's profiling for session (None in processes
    that only contribute token counts)."""
    if profiling_module is None:
        try:
            profiling_module = importlib.import_module("trl.extras.profiling")
        except ImportError as e:
            raise ImportError("eerl.integrations.trl needs TRL (trl.extras.profiling): %s" % e)
    if not hasattr(profiling_module, "ProfilingContext"):
        raise RuntimeError("%s has no ProfilingContext: this TRL is not the one the integration "
                           "knows (docs/integrations/trl.md)" % profiling_module.__name__)
    for name in ("_generate_and_score_completions", "add_callback"):
        if not hasattr(trainer, name):
            raise RuntimeError("the trainer has no %s: eerl's TRL hook needs a GRPOTrainer" % name)
    table = dict(PHASES)
    for k, v in (phases or {}).items():
        if v is None:
            table.pop(k, None)
        else:
            table[k] = v
    return TRLHook(session, trainer, table, strict, profiling_module)
