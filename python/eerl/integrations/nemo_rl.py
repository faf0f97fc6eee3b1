"""eerl for NeMo-RL's GRPO (synchronous and asynchronous), without a fork
(docs/integrations/nemo_rl.md).

    import eerl
    from eerl.integrations import nemo_rl as eerl_nemo
    session = eerl.Session(mode=eerl_nemo.mode_for(master_config), pools=...,
                           trace="eerl-run.jsonl")
    hook = eerl_nemo.install(session, master_config)  # in the driver, before grpo_train
    grpo_train(...)                                   # or async_grpo_train(...)
    hook.uninstall(); session.close()

Follows NVIDIA-NeMo/RL at tag v0.7.0 (81aa43d, 2026-07-29), the newest release, and main at
7ea279a (2026-08-22). Not run against NeMo-RL itself (it cannot be installed on the build
machine): tested against python/tests/stubs/nemo_rl, eerl's stand-in of both revisions.

Phases come from the driver's nemo_rl.utils.timer.Timer, read one of two ways, chosen at install
by trying a Timer:
  * "log": main since 1687d23 (2026-07-08) logs at DEBUG on the logger "nemo_rl.utils.timer"
    "[k=v ...] LABEL start ts=..." and "[k=v ...] LABEL end elapsed=Xs ts=..." at every start and
    stop. A logging filter there reads them (and, quiet, keeps them from the application's own
    handlers).
  * "methods": v0.7.0 and every earlier release log nothing; Timer.start and Timer.stop are
    wrapped on the class (grpo.py imports the class by name, so the class is what is patched).
Either way only the outermost mapped label is a phase (PHASES). The labels are those of
grpo_train and async_grpo_train in both revisions (the refit of async GRPO is "weight_sync",
inside main's "idle/refit_bubble").

Work comes from Logger.log_metrics(metrics, step, prefix="", ...): the step's training metrics
(prefix "train", with "global_valid_toks") end the eerl update. N = global_valid_toks; G = the
mean generated tokens per sample x samples per step, summed over the step's generation rounds
(each logged with prefix "train" in synchronous GRPO; in async GRPO the consumed groups' rollout
metrics are in the training metrics); L = the longest response ("max_gen_tokens_per_sample" or
"gen_tokens_per_sample/max"; the mean, flagged, where neither is logged). The policy version of
the batch: synchronous, the number of "policy_training" stages finished before the step's
"generation"; async, the update number less NeMo-RL's "avg_trajectory_age" (rounded).

Schedules (mode_for): synchronous GRPO in "colocated" or "disaggregated"; async GRPO on separate
generation GPUs in "drained" (generation stops for the weight update) or "inflight"
(in_flight_weight_updates: generation goes on through it); async GRPO with colocated generation
(main, Megatron generation) in "colocated": the shared GPUs generate from the end of a weight
update until the next log-prob stage, then log-prob, train and refit in turn.

Nothing passes silently (the rules of _common.Framework and PhaseDriver.update_end): install()
refuses a NeMo-RL whose Timer or Logger.log_metrics it does not find; an update that ends without
the phases the schedule always has (synchronous: generation, logprob, training, refit; async:
logprob, training) is recorded (a first update with no phase at all the runtime does not take),
then raises IntegrationError (strict) or warns once, naming NeMo-RL's version, what was missing and the
unmapped labels seen. Two checks of NeMo-RL's own
do the same: a step whose "timing/train" metrics show a mapped label the hook did not see start
and stop, and labels that say the hook is set up for another run (a synchronous hook on async
GRPO's labels or the reverse, or a context= that dropped every Timer event), which say what to
install instead.
"""

import importlib
import logging
import re
import threading
import warnings

from ._common import (Framework, IntegrationError, PhaseDriver, numeric_metrics, phase_table,
                      version_of)

FRAMEWORK = "NeMo-RL"
FOLLOWS = "v0.7.0 (81aa43d, 2026-07-29) and main at 7ea279a (2026-08-22)"

PHASES = {
    "generation": "generation",
    "prepare_for_generation": "refit",  # the name before prepare_for_generation/total
    "prepare_for_generation/total": "refit",
    "weight_sync": "refit",  # async GRPO (main: inside idle/refit_bubble)
    "logprob_inference_prep": "logprob",
    "policy_and_reference_logprobs": "logprob",
    "training_prep": "training",
    "policy_training": "training",
}

# Phases every first update of the schedule has, in every revision followed.
EXPECTED = {"sync": ("generation", "logprob", "training", "refit"),
            "async": ("logprob", "training")}
ASYNC_LABELS = ("weight_sync", "exposed_generation", "idle/refit_bubble")

TIMER_LOGGER = "nemo_rl.utils.timer"
_LINE = re.compile(r"^(?:\[(?P<ctx>[^\]]*)\] )?(?P<label>\S(?:.*\S)?) "
                   r"(?P<event>start|end elapsed=\S+) ts=\S+$")
_PROBE = "eerl/install_probe"
_GEN = "<async generation>"  # the hook's own label for a colocated collector's generation


def _get(obj, *path, default=None):
    for k in path:
        if obj is None:
            return default
        obj = obj.get(k) if isinstance(obj, dict) else getattr(obj, k, None)
    return default if obj is None else obj


def mode_for(master_config):
    """eerl's mode for a NeMo-RL master config (dict-like or attribute-style)."""
    colocated = bool(_get(master_config, "policy", "generation", "colocated", "enabled",
                          default=True))
    if _get(master_config, "grpo", "async_grpo", "enabled", default=False):
        if colocated:
            return "colocated"  # main: the engine stands down for training; phases alternate
        if _get(master_config, "grpo", "async_grpo", "in_flight_weight_updates", default=False):
            return "inflight"
        return "drained"
    return "colocated" if colocated else "disaggregated"


def _samples_per_step(master_config):
    p = _get(master_config, "grpo", "num_prompts_per_step")
    g = _get(master_config, "grpo", "num_generations_per_prompt")
    return None if p is None or g is None else int(p) * int(g)


# ---- reading the Timer -----------------------------------------------------------------------


def _ctx_of(text):
    return dict(kv.split("=", 1) for kv in (text or "").split() if "=" in kv)


class _LogFilter(logging.Filter):
    """On the timer's logger: every DEBUG record goes to the hook; quiet, it stops there (the
    application's handlers would otherwise print every start and stop once the level is DEBUG)."""

    def __init__(self, hook, quiet):
        super().__init__()
        self.hook = hook
        self.quiet = quiet

    def filter(self, record):
        if record.levelno > logging.DEBUG:
            return True
        try:
            m = _LINE.match(record.getMessage())
        except Exception:
            m = None
        if m is not None:
            kind = "start" if m.group("event") == "start" else "end"
            self.hook._event(m.group("label"), kind, _ctx_of(m.group("ctx")))
        return not self.quiet


def _probe_logs(timer_cls, lg):
    """Does this Timer log its start and stop? Tries one on a throwaway label, out of sight."""
    got = []

    class _Catch(logging.Filter):
        def filter(self, record):
            try:
                got.append(record.getMessage())
            except Exception:
                pass
            return False

    catch, old = _Catch(), lg.level
    lg.addFilter(catch)
    lg.setLevel(logging.DEBUG)
    try:
        t = timer_cls()
        t.start(_PROBE)
        t.stop(_PROBE)
    finally:
        lg.removeFilter(catch)
        lg.setLevel(old)
    events = [m.group("event")[:3] for m in map(_LINE.match, got)
              if m is not None and m.group("label") == _PROBE]
    return events == ["sta", "end"], t


# ---- the hook ----------------------------------------------------------------------------------


class NemoRLHook:
    def __init__(self, session, schedule, samples_per_step, phases, strict, log_metrics, context,
                 quiet, source, framework, timer_cls, timer_logger, logger_cls):
        self.session = session
        self.schedule = schedule  # "sync" or "async"
        self.mode = getattr(session, "mode", "colocated")
        self.samples_per_step = samples_per_step
        self.phases = dict(phases)
        self.context = None if context is None else {k: str(v) for k, v in context.items()}
        self.framework = framework
        self.driver = PhaseDriver(session, strict=strict, framework=framework,
                                  expect=EXPECTED[schedule])
        self.strict = strict
        self.log_metrics = log_metrics
        self.source = source  # "log" or "methods"
        self.version = framework.version
        self.refits = 0
        self.trainings = 0  # finished "policy_training": the version a generation runs on
        self.updates = 0
        self.complaints = 0  # NeMo-RL's own findings (the driver counts blind_updates)
        self._lock = threading.RLock()
        self._gen_version = None
        self._rounds = []  # (mean, longest) per generation round since the last update end
        self._gen_on = False  # async: the collector's generation is open as a phase
        self._hinted = False
        self._phased = False  # a mapped phase began in this update
        self._warned = set()
        self._labels = []  # labels seen this update, in order
        self._labels_prev = set()  # ... in the update that ended last
        self._dropped = 0  # timer events another context's (context=)
        self._installed = False

        self._timer_cls = timer_cls
        self._lg = timer_logger
        self._filter = None
        self._old_level = None
        self._own, self._wrappers = {}, {}
        if source == "log":
            self._filter = _LogFilter(self, quiet)
            self._lg.addFilter(self._filter)
            self._old_level = self._lg.level
            if self._lg.getEffectiveLevel() > logging.DEBUG:
                self._lg.setLevel(logging.DEBUG)
        else:
            self._wrap_timer()

        self._logger_cls = logger_cls
        self._orig_log_metrics = logger_cls.log_metrics
        hook = self

        def log_metrics(self_, metrics, step, prefix="", *args, **kwargs):
            r = hook._orig_log_metrics(self_, metrics, step, prefix, *args, **kwargs)
            extra = hook._on_metrics(metrics, prefix, step)
            if extra and hook.log_metrics:
                hook._orig_log_metrics(self_, extra, step, prefix, *args, **kwargs)
            return r

        log_metrics.__wrapped__ = self._orig_log_metrics
        logger_cls.log_metrics = log_metrics
        self._log_metrics_wrapper = log_metrics
        self._installed = True
        if self.schedule == "async":
            self._gen(True)  # the collector generates from the start

    def _wrap_timer(self):
        cls, hook = self._timer_cls, self
        # Put back on uninstall: the class's own methods, or nothing where it inherited them.
        self._own = {n: cls.__dict__.get(n) for n in ("start", "stop")}
        orig_start, orig_stop = cls.start, cls.stop

        def start(self_, label, *args, **kwargs):
            r = orig_start(self_, label, *args, **kwargs)
            hook._event(label, "start", getattr(self_, "_context", None))
            return r

        def stop(self_, label, *args, **kwargs):
            r = orig_stop(self_, label, *args, **kwargs)
            hook._event(label, "end", getattr(self_, "_context", None))
            return r

        start.__wrapped__, stop.__wrapped__ = orig_start, orig_stop
        cls.start, cls.stop = start, stop
        self._wrappers = {"start": start, "stop": stop}

    def __repr__(self):
        return "<NemoRLHook NeMo-RL %s, %s GRPO, mode %s, timer read by %s>" % (
            self.version, self.schedule, self.mode, self.source)

    # ---- saying so, loudly -----------------------------------------------------------------

    def _describe(self, what):
        return "eerl: %s (timer read by %s): %s. %s" % (
            self.framework, "its DEBUG log lines" if self.source == "log"
            else "wrapping Timer.start/stop", what, self.framework._known())

    def _complain(self, what, missing, kind):
        """NeMo-RL's own findings, through PhaseDriver.warn_once: strict raises IntegrationError,
        else one warning per kind of finding; hook.complaints counts them all."""
        self.complaints += 1
        self.driver.warn_once(self._describe(what), missing, key=("nemo_rl", kind))

    def _hint(self, labels, phased):
        """What to do instead, where the update's labels say the hook is set up for another run:
        context= dropped every event, or the Timer shows the other GRPO loop's labels."""
        if self._hinted:
            return None
        if not phased and self._dropped:
            self._hinted = True
            return ("context=%r dropped all %d Timer events so far: leave context out, or give "
                    "the driver Timer's own values" % (self.context, self._dropped))
        if self.schedule == "sync" and "generation" not in labels and \
                any(l in ASYNC_LABELS for l in labels):
            self._hinted = True
            return ("The Timer shows async GRPO's labels (%s): install with the run's "
                    "master_config (or async_grpo=True) and a session of mode_for(master_config)"
                    % ", ".join(l for l in labels if l in ASYNC_LABELS))
        if self.schedule == "async" and "generation" in labels:
            self._hinted = True
            return ("The Timer shows synchronous GRPO's label generation: install with the run's "
                    "master_config (or async_grpo=False) and a session of "
                    "mode_for(master_config)")
        return None

    def _check_timing(self, metrics, step):
        ran = sorted(l for l in metrics if self.phases.get(l) is not None
                     and isinstance(metrics[l], (int, float)))
        unseen = [l for l in ran if l not in self._labels_prev]
        if unseen:
            self._complain("its timing metrics of step %s show %s ran, but the hook did not see "
                           "%s start and stop, so eerl counted that time as other"
                           % (step, ", ".join(ran), ", ".join(unseen)), unseen, "timing")

    # ---- phases from the timer ---------------------------------------------------------------

    def _event(self, label, kind, ctx):
        with self._lock:
            if self.context is not None:
                ctx = {k: str(v) for k, v in (ctx or {}).items()}
                if any(ctx.get(k) != v for k, v in self.context.items()):
                    self._dropped += 1
                    return
            if kind == "start":
                if label not in self._labels:
                    self._labels.append(label)
                self._start(label)
            else:
                self._stop(label)

    def _gen(self, on):
        """Async: the trajectory collector's generation, which the driver's Timer never shows."""
        if on == self._gen_on:
            return
        if self.mode == "colocated":  # through the driver: the shared pool is in one phase
            if on:
                self.driver.enter(_GEN, "generation")
            else:
                self.driver.exit(_GEN)
        elif on:
            self.driver.call(self.session.phase_begin, "generation", "generation")
        else:
            self.driver.call(self.session.phase_end, "generation", "generation")
        self._gen_on = on
        if on:
            self.driver.saw("generation")
            self._phased = True

    def _start(self, label):
        phase = self.phases.get(label)
        if phase is None:
            self.driver.enter(label, None)
            return
        if self.schedule == "async":
            if phase == "generation":
                return  # a synchronous label under an async hook: _hint says so at update end
            if self.mode == "colocated" or (phase == "refit" and self.mode == "drained"):
                self._gen(False)  # colocated: the engine stood down; drained: it drains
        elif phase == "generation" and self._gen_version is None:
            self._gen_version = self.trainings
        # In-flight, the generation pool keeps generating while it takes the new weights: the
        # weight update is the training pool's phase only.
        pool = "training" if phase == "refit" and self.mode == "inflight" else None
        self.driver.enter(label, phase, pool)
        self._phased = True

    def _stop(self, label):
        phase = self.phases.get(label)
        if self.schedule == "async" and phase == "generation":
            return
        self.driver.exit(label)
        if label == "policy_training":
            self.trainings += 1
        if phase == "refit" and self.driver.active is None:
            self.refits += 1
            if self.schedule == "async" and self.mode in ("colocated", "drained"):
                self._gen(True)

    # ---- work from the metrics -----------------------------------------------------------------

    @staticmethod
    def _longest(m):
        v = m.get("max_gen_tokens_per_sample", m.get("gen_tokens_per_sample/max"))
        return None if v is None else float(v)

    def _on_metrics(self, metrics, prefix, step=None):
        if not isinstance(metrics, dict):
            return None
        with self._lock:
            if prefix == "timing/train":
                self._check_timing(metrics, step)
                return None
            if prefix != "train":
                return None
            if "global_valid_toks" not in metrics:
                if "mean_gen_tokens_per_sample" in metrics:  # a generation round (synchronous)
                    self._rounds.append((float(metrics["mean_gen_tokens_per_sample"]),
                                         self._longest(metrics)))
                return None
            return self._update_end(metrics)

    def _update_end(self, metrics):
        N = float(metrics["global_valid_toks"])
        rounds, self._rounds = self._rounds, []
        if not rounds and "mean_gen_tokens_per_sample" in metrics:  # async: merged in
            rounds = [(float(metrics["mean_gen_tokens_per_sample"]), self._longest(metrics))]
        l_from_mean = 0
        if rounds:
            G = sum(mean for mean, _ in rounds) * self.samples_per_step
            if any(longest is None for _, longest in rounds):
                l_from_mean = 1
                self._warn_once("the rollout metrics have no max generated length; L is the mean "
                                "(eerl/l_from_mean = 1)")
            L = max(mean if longest is None else longest for mean, longest in rounds)
        else:
            G, L, l_from_mean = N, N / self.samples_per_step, 1
            self._warn_once("the step's metrics have no mean_gen_tokens_per_sample; G is taken "
                            "as N and L as N / samples_per_step (eerl/l_from_mean = 1)")
        gen_was_on = self._gen_on
        self._gen(False)
        labels, self._labels = self._labels, []
        self._labels_prev = set(labels)
        version, self._gen_version = self._gen_version, None
        # in eerl's numbering, which counts updates from 1: the policy after k trainings is
        # version k + 1, and this update is self.updates + 1
        version = None if version is None else version + 1
        if self.schedule == "async":
            age = metrics.get("avg_trajectory_age")
            version = None if age is None else max(0, self.updates + 1 - int(round(float(age))))
        hint = self._hint(labels, self._phased)
        self._phased = False
        r = None
        try:
            if N > 0:
                r = self.driver.update_end(generated_tokens=G, valid_tokens=N,
                                           longest_response=float(L), policy_version=version)
            else:  # nothing to observe: the runtime takes no update without valid tokens
                self.driver.close_all()
        except IntegrationError as e:
            if hint is None:
                raise
            raise IntegrationError("%s %s." % (e, hint), e.framework, e.version,
                                   e.missing) from None
        finally:
            if gen_was_on:
                self._gen(True)
        if hint is not None:  # not strict (or the update's phases were all there): say it
            self._complain(hint[0].lower() + hint[1:], [hint.split(":")[0]], "hint")
        if r is None:
            return None
        self.updates += 1
        out = numeric_metrics(self.session)
        out["eerl/l_from_mean"] = l_from_mean
        return out

    def _warn_once(self, what):
        msg = "eerl: %s %s: %s" % (FRAMEWORK, self.version, what)
        if msg not in self._warned:
            self._warned.add(msg)
            warnings.warn(msg, RuntimeWarning, stacklevel=5)

    def uninstall(self):
        """Restores the Timer (or its logger) and Logger.log_metrics and ends any open phase.
        Call it before session.close(); a second call does nothing."""
        if not self._installed:
            return
        self._installed = False
        if self._filter is not None:
            self._lg.removeFilter(self._filter)
            self._lg.setLevel(self._old_level)
        else:
            for name, wrapper in self._wrappers.items():
                if self._timer_cls.__dict__.get(name) is not wrapper:
                    continue  # wrapped again since: leave it
                if self._own[name] is None:
                    delattr(self._timer_cls, name)
                else:
                    setattr(self._timer_cls, name, self._own[name])
        if self._logger_cls.__dict__.get("log_metrics") is self._log_metrics_wrapper:
            self._logger_cls.log_metrics = self._orig_log_metrics
        with self._lock:
            self._gen(False)
            self.driver.close_all()


def _import(name, module):
    if module is not None:
        return module
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ImportError("eerl.integrations.nemo_rl needs NeMo-RL (%s): %s" % (name, e))


def install(session, master_config=None, samples_per_step=None, async_grpo=None, phases=None,
            strict=False, log_metrics=True, context=None, quiet=True, timer_source="auto",
            timer_module=None, logger_module=None):
    """Hooks NeMo-RL's driver Timer and Logger.log_metrics for session; call it in the driver
    process (where grpo_train / async_grpo_train runs), before the training loop.

    master_config: the run's MasterConfig (or its dict): gives samples_per_step
        (num_prompts_per_step x num_generations_per_prompt) and the schedule (async GRPO or not),
        and session.mode must be mode_for(master_config).
    samples_per_step / async_grpo: the same without a master_config (async_grpo defaults to
        session.mode being "drained" or "inflight").
    phases: {label: phase or None} added to (or removed from) PHASES.
    strict: raise IntegrationError (and EerlError) instead of warning.
    context: count only Timers whose context has these values, e.g. {"worker": "driver"}
        (NeMo-RL's Timer has a context on main only).
    quiet: keep the Timer's DEBUG lines from the application's log handlers ("log" source).
    timer_source: "auto" (try a Timer: "log" where it logs its starts and stops, else
        "methods"), "log" or "methods".
    timer_module / logger_module: nemo_rl.utils.timer / nemo_rl.utils.logger (imported when None).
    """
    if timer_source not in ("auto", "log", "methods"):
        raise ValueError("timer_source %r: use 'auto', 'log' or 'methods'" % (timer_source,))
    mode = getattr(session, "mode", None)
    if master_config is not None:
        want = mode_for(master_config)
        if mode != want:
            raise ValueError("this NeMo-RL config runs as eerl mode %r (mode_for(master_config)),"
                             " but the session's mode is %r: open the session with "
                             "mode=eerl_nemo.mode_for(master_config)" % (want, mode))
        if samples_per_step is None:
            samples_per_step = _samples_per_step(master_config)
        if async_grpo is None:
            async_grpo = bool(_get(master_config, "grpo", "async_grpo", "enabled", default=False))
    if async_grpo is None:
        async_grpo = mode in ("drained", "inflight")
    if async_grpo and mode == "disaggregated":
        raise ValueError("async GRPO on separate generation GPUs is mode 'drained' (or 'inflight'"
                         " with in_flight_weight_updates), not 'disaggregated'")
    if not async_grpo and mode in ("drained", "inflight"):
        raise ValueError("synchronous GRPO is mode 'colocated' or 'disaggregated', not %r "
                         "(pass the run's master_config, or async_grpo=True)" % (mode,))
    if samples_per_step is None:
        raise ValueError("samples_per_step is needed (num_prompts_per_step x "
                         "num_generations_per_prompt): pass master_config or samples_per_step")
    if int(samples_per_step) <= 0:
        raise ValueError("samples_per_step must be positive, not %r" % (samples_per_step,))

    timer_mod = _import("nemo_rl.utils.timer", timer_module)
    logger_mod = _import("nemo_rl.utils.logger", logger_module)
    try:  # what the running code says: a source checkout's pip metadata may be stale
        version = str(importlib.import_module("nemo_rl").__version__)
    except Exception:
        version = version_of("nemo-rl")
    fw = Framework(FRAMEWORK, version=version, hooks="the mapped stages of the driver's Timer",
                   tested="%s, in eerl's stand-in only (NeMo-RL itself untested)" % FOLLOWS,
                   doc="docs/integrations/nemo_rl.md")

    timer_cls = getattr(timer_mod, "Timer", None)
    logger_cls = getattr(logger_mod, "Logger", None)
    tname, lname = timer_mod.__name__ + ".Timer", logger_mod.__name__ + ".Logger"
    fw.require({tname: isinstance(timer_cls, type),
                lname + ".log_metrics()": isinstance(logger_cls, type)
                and callable(getattr(logger_cls, "log_metrics", None))})
    fw.require({"%s.%s()" % (tname, n): callable(getattr(timer_cls, n, None))
                for n in ("start", "stop")})
    lg = getattr(timer_mod, "logger", None)
    if not isinstance(lg, logging.Logger):
        lg = logging.getLogger(timer_mod.__name__)
    try:
        logs, probe = _probe_logs(timer_cls, lg)
    except Exception as e:
        fw.refuse("a %s() that starts and stops (trying one raised %s: %s)"
                  % (tname, type(e).__name__, e))
    source = timer_source
    if source == "auto":
        source = "log" if logs else "methods"
    elif source == "log" and not logs:
        fw.refuse("DEBUG line at a Timer start and stop on the logger %r (NeMo-RL main has them "
                  "since 2026-07-08, no release does; timer_source='auto' wraps Timer.start/stop "
                  "instead)" % lg.name)
    fw.hooks += (" (read from its DEBUG log lines)" if source == "log"
                 else " (read by wrapping Timer.start/stop)")
    if context is not None and not isinstance(getattr(probe, "_context", None), dict):
        raise ValueError("context=%r filters on the Timer's context, which NeMo-RL's Timer has "
                         "only on main since 2026-07-08; this NeMo-RL (%s) has none: leave "
                         "context out" % (context, version))

    table = phase_table(PHASES, phases)
    return NemoRLHook(session, "async" if async_grpo else "sync", int(samples_per_step), table,
                      strict, log_metrics, context, quiet, source, fw, timer_cls, lg, logger_cls)
