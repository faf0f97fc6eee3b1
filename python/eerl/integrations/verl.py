"""eerl for verl's PPO/GRPO trainer, without a fork (docs/integrations/verl.md).

    import eerl
    from eerl.integrations import verl as eerl_verl
    session = eerl.Session(mode="colocated", pools={"generation": [0, 1, 2, 3, 4, 5, 6, 7],
                                                    "training": [0, 1, 2, 3, 4, 5, 6, 7]},
                           trace="eerl-run.jsonl")
    hook = eerl_verl.install(session)   # before trainer.fit(), in the process that runs fit()
    trainer.fit()
    hook.uninstall(); session.close()

Hook points, as found in verl (verl-project/verl, verl/trainer/ppo/ray_trainer.py at commit
0094eb2057e6f3210c2a4fca88704689d02879aa):
  * ray_trainer.marked_timer(name, timing_raw, color=None, ...): the module-level name the fit()
    loop calls for every stage. Wrapped to also begin/end eerl phases:
        "gen"                                -> generation
        "old_log_prob", "ref", "values"      -> logprob   (training clock)
        "update_actor", "update_critic"      -> training
        "update_weights"                     -> refit
    Anything else ("step", "reward", "adv", "testing", "save_checkpoint", ...) is left to eerl's
    "other" time. Only the outermost mapped timer is a phase.
  * ray_trainer.compute_data_metrics(batch, use_critic): called once per step, after the "step"
    timer, with the step's batch. Wrapped to end the eerl update with G, N, L from
    batch.batch["response_mask"] (G = N = masked response tokens, L = the longest response),
    and to add eerl's figures ("eerl/...") to the metrics verl logs.
  The policy version of a step's batch is the number of "update_weights" stages finished before
  that step's "gen" began.

Placement: mode="colocated" for verl's hybrid engine (one global pool), "disaggregated" with
separate rollout and trainer pools; the session's pools are this node's GPU indices (several
nodes: eerl.multinode). Not run against verl itself (no verl on the build machine): tested
against python/tests/stubs/verl, a stand-in with the same names, signatures and call order.
"""

import importlib

from ._common import PhaseDriver, numeric_metrics, token_counts

PHASES = {
    "gen": "generation",
    "old_log_prob": "logprob",
    "ref": "logprob",
    "values": "logprob",
    "update_actor": "training",
    "update_critic": "training",
    "update_weights": "refit",
}

_TARGET = "verl.trainer.ppo.ray_trainer"


class VerlHook:
    """The installed hook; uninstall() puts verl's functions back."""

    def __init__(self, session, module, phases, strict, log_metrics):
        self.session = session
        self.module = module
        self.phases = dict(phases)
        self.driver = PhaseDriver(session, strict=strict)
        self.log_metrics = log_metrics
        self.refits = 0
        self._gen_version = None
        self.updates = 0
        self._orig_timer = module.marked_timer
        self._orig_metrics = module.compute_data_metrics
        hook = self

        class _Timer:
            __slots__ = ("name", "inner")

            def __init__(self, name, inner):
                self.name, self.inner = name, inner

            def __enter__(self):
                r = self.inner.__enter__()
                hook._enter(self.name)
                return r

            def __exit__(self, et, ev, tb):
                try:
                    hook._exit(self.name)
                except BaseException:
                    self.inner.__exit__(et, ev, tb)
                    raise
                return self.inner.__exit__(et, ev, tb)

        def marked_timer(name, timing_raw, *args, **kwargs):
            return _Timer(name, hook._orig_timer(name, timing_raw, *args, **kwargs))

        def compute_data_metrics(batch, *args, **kwargs):
            out = hook._orig_metrics(batch, *args, **kwargs)
            extra = hook._update_end(batch)
            if extra and hook.log_metrics:
                out = dict(out)
                out.update(extra)
            return out

        marked_timer.__wrapped__ = self._orig_timer
        compute_data_metrics.__wrapped__ = self._orig_metrics
        module.marked_timer = marked_timer
        module.compute_data_metrics = compute_data_metrics
        self._installed = (marked_timer, compute_data_metrics)

    def _enter(self, name):
        phase = self.phases.get(str(name))
        if phase == "generation" and self._gen_version is None:
            self._gen_version = self.refits
        self.driver.enter(str(name), phase)

    def _exit(self, name):
        self.driver.exit(str(name))
        if self.phases.get(str(name)) == "refit":
            self.refits += 1

    def _update_end(self, batch):
        mask = batch.batch["response_mask"]
        G, N, L = token_counts(mask)
        self.driver.close_all()
        version, self._gen_version = self._gen_version, None
        if N <= 0:
            return {}
        r = self.driver.call(self.session.update_end, generated_tokens=G, valid_tokens=N,
                             longest_response=L, policy_version=version)
        if r is None:
            return {}
        self.updates += 1
        return numeric_metrics(self.session)

    def uninstall(self):
        """Restores verl's marked_timer and compute_data_metrics (only if still ours)."""
        m = self.module
        if m.marked_timer is self._installed[0]:
            m.marked_timer = self._orig_timer
        if m.compute_data_metrics is self._installed[1]:
            m.compute_data_metrics = self._orig_metrics


def install(session, phases=None, strict=False, log_metrics=True, module=None):
    """Hooks verl's ray_trainer for session. phases: overrides of the timer-name -> eerl phase map
    (a value of None drops a name). strict: let eerl errors stop the run. log_metrics: add eerl's
    figures to what verl logs. module: the ray_trainer module (default: imported by name)."""
    if module is None:
        try:
            module = importlib.import_module(_TARGET)
        except ImportError as e:
            raise ImportError("eerl.integrations.verl needs verl (%s): %s" % (_TARGET, e))
    for name in ("marked_timer", "compute_data_metrics"):
        if not hasattr(module, name):
            raise RuntimeError("%s has no %s: this verl is not the one the integration knows "
                               "(see docs/integrations/verl.md for the version checked)"
                               % (module.__name__, name))
    table = dict(PHASES)
    for k, v in (phases or {}).items():
        if v is None:
            table.pop(k, None)
        else:
            table[k] = v
    return VerlHook(session, module, table, strict, log_metrics)
