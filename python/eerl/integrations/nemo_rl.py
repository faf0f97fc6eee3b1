"""eerl for NeMo-RL's GRPO, without a fork (docs/integrations/nemo_rl.md).

    import eerl
    from eerl.integrations import nemo_rl as eerl_nemo
    mode = eerl_nemo.mode_for(master_config)          # colocated / disaggregated / drained / inflight
    session = eerl.Session(mode=mode, pools=..., trace="eerl-run.jsonl")
    hook = eerl_nemo.install(session, samples_per_step=num_prompts_per_step * num_generations)
    grpo_train(...)                                   # or async_grpo_train(...)
    hook.uninstall(); session.close()

Hook points, as found in NeMo-RL (NVIDIA-NeMo/RL: nemo_rl/utils/timer.py at commit
05c502c0cc044ca6f6af30578b9055dfd277bf01, nemo_rl/algorithms/grpo.py at 002cdc27b8019eafc470f0aab22d4a7206d0de81,
nemo_rl/utils/logger.py at 0275e75840b11fd622e58886ae3f462dc334c1fa):
  * Timer.start/stop log "[k=v ...] LABEL start ts=..." and "[k=v ...] LABEL end elapsed=Xs ts=..."
    at DEBUG on the logger "nemo_rl.utils.timer". A logging handler there turns them into phases:
        "generation"                                             -> generation
        "prepare_for_generation", "prepare_for_generation/total" -> refit
        "logprob_inference_prep", "policy_and_reference_logprobs" -> logprob
        "training_prep", "policy_training"                       -> training
    Nested labels ("prepare_for_generation/transfer_and_update_weights") stay inside their parent.
  * Logger.log_metrics(metrics, step, prefix="", step_metric=None, step_finished=False): grpo_train
    logs the rollout metrics (prefix "train": "mean_gen_tokens_per_sample", and where the version
    has them "max_gen_tokens_per_sample" or "gen_tokens_per_sample/max") after generation, and the
    step's training metrics (prefix "train", with "global_valid_toks") at the end of the step.
    The second call ends the eerl update: N = global_valid_toks, G = mean generated tokens per
    sample x samples_per_step, L = the max generated tokens per sample (when the rollout metrics
    lack a max, L falls back to the mean and eerl/l_from_mean is 1 in the logged figures).
    eerl's figures are then logged through the same Logger with prefix "train" ("train/eerl/...").
    The policy version of a step's batch is the number of "policy_training" stages finished before
    the step's "generation" began.
  * Async GRPO (grpo.async_grpo.enabled): generation runs continuously in the trajectory
    collector; the driver's timer shows the training side only. mode_for() picks "inflight" when
    grpo.async_grpo.in_flight_weight_updates is set (generation goes on during the weight update)
    and "drained" otherwise (generation pauses for it). The hook keeps the generation pool in its
    generation phase between updates (split at each update end) and, drained, out of it during
    refit; in-flight, the refit is the training pool's phase only. The async loop's own timer labels were not checked beyond the names above.

Not run against NeMo-RL itself (it cannot be installed on the build machine): tested against
python/tests/stubs/nemo_rl, a stand-in with the same logger name, message format, labels and
Logger.log_metrics signature.
"""

import importlib
import logging
import re
import threading
import warnings

from ._common import PhaseDriver, numeric_metrics

PHASES = {
    "generation": "generation",
    "prepare_for_generation": "refit",
    "prepare_for_generation/total": "refit",
    "logprob_inference_prep": "logprob",
    "policy_and_reference_logprobs": "logprob",
    "training_prep": "training",
    "policy_training": "training",
}

TIMER_LOGGER = "nemo_rl.utils.timer"
_LINE = re.compile(r"^(?:\[(?P<ctx>[^\]]*)\] )?(?P<label>\S(?:.*\S)?) "
                   r"(?P<event>start|end elapsed=\S+) ts=\S+$")


def mode_for(master_config):
    """eerl's mode for a NeMo-RL master config (dict-like or attribute-style)."""
    def get(obj, *path, default=None):
        for k in path:
            if obj is None:
                return default
            if isinstance(obj, dict):
                obj = obj.get(k)
            else:
                obj = getattr(obj, k, None)
        return default if obj is None else obj

    if get(master_config, "grpo", "async_grpo", "enabled", default=False):
        if get(master_config, "grpo", "async_grpo", "in_flight_weight_updates", default=False):
            return "inflight"
        return "drained"
    if get(master_config, "policy", "generation", "colocated", "enabled", default=True):
        return "colocated"
    return "disaggregated"


class _TimerHandler(logging.Handler):
    def __init__(self, hook):
        super().__init__(level=logging.DEBUG)
        self.hook = hook

    def emit(self, record):
        try:
            msg = record.getMessage()
        except Exception:
            return
        m = _LINE.match(msg)
        if m is None:
            return
        if self.hook.context is not None:
            ctx = dict(kv.split("=", 1) for kv in (m.group("ctx") or "").split() if "=" in kv)
            if any(ctx.get(k) != str(v) for k, v in self.hook.context.items()):
                return
        if m.group("event") == "start":
            self.hook._start(m.group("label"))
        else:
            self.hook._stop(m.group("label"))


class _QuietFilter(logging.Filter):
    """Feeds DEBUG timer records to the handler and keeps them from the application's own
    handlers (which would otherwise print every start/stop once the level is DEBUG)."""

    def __init__(self, handler):
        super().__init__()
        self.handler = handler

    def filter(self, record):
        if record.levelno <= logging.DEBUG:
            self.handler.handle(record)
            return False
        return True


class NemoRLHook:
    def __init__(self, session, samples_per_step, phases, strict, log_metrics, context, quiet,
                 logger_module):
        self.session = session
        self.samples_per_step = samples_per_step
        self.phases = dict(phases)
        self.context = context
        self.driver = PhaseDriver(session, strict=strict)
        self.log_metrics = log_metrics
        self.mode = getattr(session, "mode", "colocated")
        self.async_mode = self.mode in ("drained", "inflight")
        self.refits = 0
        self.trainings = 0  # finished "policy_training": the version a generation runs on
        self.updates = 0
        self._gen_version = None
        self._rollout = None
        self._lock = threading.Lock()
        self._async_gen_on = False
        self._warned_l = False

        self._logger = logging.getLogger(TIMER_LOGGER)
        self._old_level = self._logger.level
        self._handler = _TimerHandler(self)
        self._filter = None
        if quiet:
            self._filter = _QuietFilter(self._handler)
            self._logger.addFilter(self._filter)
        else:
            self._logger.addHandler(self._handler)
        if self._logger.getEffectiveLevel() > logging.DEBUG:
            self._logger.setLevel(logging.DEBUG)

        self._logger_cls = None
        if logger_module is not None:
            cls = getattr(logger_module, "Logger", None)
            if cls is None or not hasattr(cls, "log_metrics"):
                raise RuntimeError("%s has no Logger.log_metrics: this NeMo-RL is not the one the "
                                   "integration knows (docs/integrations/nemo_rl.md)"
                                   % logger_module.__name__)
            self._logger_cls = cls
            self._orig_log_metrics = cls.log_metrics
            hook = self

            def log_metrics(self_, metrics, step, prefix="", *args, **kwargs):
                r = hook._orig_log_metrics(self_, metrics, step, prefix, *args, **kwargs)
                extra = hook._on_metrics(metrics, prefix)
                if extra and hook.log_metrics:
                    hook._orig_log_metrics(self_, extra, step, prefix, *args, **kwargs)
                return r

            log_metrics.__wrapped__ = self._orig_log_metrics
            cls.log_metrics = log_metrics
            self._installed = log_metrics
        if self.async_mode:
            self._async_gen(True)

    # ---- phases from the timer ---------------------------------------------------------------

    def _async_gen(self, on):
        if on and not self._async_gen_on:
            self.driver.call(self.session.phase_begin, "generation", "generation")
            self._async_gen_on = True
        elif not on and self._async_gen_on:
            self.driver.call(self.session.phase_end, "generation", "generation")
            self._async_gen_on = False

    def _start(self, label):
        with self._lock:
            phase = self.phases.get(label)
            if self.async_mode and phase == "generation":
                return  # the collector's generation is tracked as a whole
            if phase == "generation" and self._gen_version is None:
                self._gen_version = self.trainings
            if phase == "refit" and self.mode == "drained":
                self._async_gen(False)
            # In-flight, the generation pool keeps generating while it takes the new weights:
            # the weight update is the training pool's phase only.
            pool = "training" if phase == "refit" and self.mode == "inflight" else None
            self.driver.enter(label, phase, pool)

    def _stop(self, label):
        with self._lock:
            phase = self.phases.get(label)
            if self.async_mode and phase == "generation":
                return
            self.driver.exit(label)
            if label == "policy_training":
                self.trainings += 1
            if phase == "refit":
                self.refits += 1
                if self.mode == "drained":
                    self._async_gen(True)

    # ---- work from the metrics -----------------------------------------------------------------

    def _on_metrics(self, metrics, prefix):
        if prefix != "train" or not isinstance(metrics, dict):
            return None
        if "mean_gen_tokens_per_sample" in metrics:
            self._rollout = dict(metrics)
        if "global_valid_toks" not in metrics:
            return None
        with self._lock:
            return self._update_end(metrics)

    def _update_end(self, metrics):
        N = float(metrics["global_valid_toks"])
        ro = self._rollout or {}
        self._rollout = None
        mean = ro.get("mean_gen_tokens_per_sample")
        longest = ro.get("max_gen_tokens_per_sample", ro.get("gen_tokens_per_sample/max"))
        l_from_mean = 0
        if longest is None and mean is not None:
            longest, l_from_mean = mean, 1
            if not self._warned_l:
                self._warned_l = True
                warnings.warn("eerl: the rollout metrics have no max generated length; L is the "
                              "mean (eerl/l_from_mean = 1)", RuntimeWarning, stacklevel=4)
        if mean is not None and self.samples_per_step:
            G = float(mean) * self.samples_per_step
        else:
            G = N  # without the rollout figures the consumed tokens are the best count we have
        if longest is None:
            longest = N / max(1, self.samples_per_step or 1)
            l_from_mean = 1
        gen_was_on = self._async_gen_on
        self._async_gen(False)
        self.driver.close_all()
        version, self._gen_version = self._gen_version, None
        if self.async_mode:
            version = None  # the consumed batch's version is the collector's, not visible here
        r = None
        if N > 0:
            r = self.driver.call(self.session.update_end, generated_tokens=G, valid_tokens=N,
                                 longest_response=float(longest), policy_version=version)
        if gen_was_on:
            self._async_gen(True)
        if r is None:
            return None
        self.updates += 1
        out = numeric_metrics(self.session)
        out["eerl/l_from_mean"] = l_from_mean
        return out

    def uninstall(self):
        if self._filter is not None:
            self._logger.removeFilter(self._filter)
        else:
            self._logger.removeHandler(self._handler)
        self._logger.setLevel(self._old_level)
        if self._logger_cls is not None and self._logger_cls.log_metrics is self._installed:
            self._logger_cls.log_metrics = self._orig_log_metrics
        with self._lock:
            self._async_gen(False)
            self.driver.close_all()


def install(session, samples_per_step=None, phases=None, strict=False, log_metrics=True,
            context=None, quiet=True, logger_module=None):
    """Hooks NeMo-RL's timer log and Logger.log_metrics for session.

    samples_per_step: responses per step (num_prompts_per_step x num_generations_per_prompt),
        to turn the mean generated length into G. context: only timer lines whose "[k=v ...]"
        prefix has these values count (e.g. {"worker": "driver"}). quiet: keep the timer's DEBUG
        lines from the application's log handlers. logger_module: nemo_rl.utils.logger (imported
        by name when None)."""
    if samples_per_step is not None and int(samples_per_step) <= 0:
        raise ValueError("samples_per_step must be positive, not %r" % (samples_per_step,))
    if logger_module is None:
        try:
            logger_module = importlib.import_module("nemo_rl.utils.logger")
        except ImportError as e:
            raise ImportError("eerl.integrations.nemo_rl needs NeMo-RL (nemo_rl.utils.logger): %s"
                              % e)
    table = dict(PHASES)
    for k, v in (phases or {}).items():
        if v is None:
            table.pop(k, None)
        else:
            table[k] = v
    return NemoRLHook(session, samples_per_step and int(samples_per_step), table, strict,
                      log_metrics, context, quiet, logger_module)
