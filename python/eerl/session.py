"""eerl.Session: one runtime session (eerl_rt, include/eerl/runtime.h) per RL job.

Owns: the eerl_rt handle. The runtime opens and owns the node's GPUs (through eerld, or NVML in
this process: it decides, from the eerld= keyword, include/eerl/runtime.h) and the eerld
connection. Closing a session (close(), garbage collection, interpreter exit, or SIGTERM, SIGHUP
or SIGQUIT) closes the runtime, which restores every clock it changed, then frees the device and
the connection (eerld also resets what that connection held).

Signals: the first session installs a handler for SIGTERM, SIGHUP and SIGQUIT, the signals a
supervisor (Slurm, Kubernetes, systemd, torchrun) sends to end a job (main thread only; each only
when its handler is the default or a Python callable). When the program had its own Python handler
for the signal, that handler runs first, with every session still open (a checkpoint can save the
controller state and finish the update in flight), and eerl closes nothing: the sessions close
when the program ends (its with-block, close(), garbage collection, the atexit hook). Otherwise it
closes every live session, restores the default action and sends the signal to the process again,
so the exit status is still "killed by" it. SIGINT keeps Python's own handler (KeyboardInterrupt,
then the same exit paths). Python runs the handler between bytecodes of the main thread, not in
signal context, so calling into libeerl there is safe.

Fork: a session belongs to the process that opened it. In a forked child (fork without exec) every
call raises EerlError and close() only marks the child's copy closed, so a child never touches,
hangs on or keeps alive the parent's clocks, meter thread, trace or eerld lease.
"""

import atexit
import ctypes as C
import functools
import json
import operator
import os
import signal
import threading
import time
import warnings
import weakref

from . import _lib
from . import _types as T
from . import api
from . import options
from . import summary as _summary
from ._lib import EerlError

_live = weakref.WeakSet()
_live_lock = threading.Lock()
_sig_installed = False
_sig_previous = {}  # signal -> the program's Python handler, or None (the default action)
# What a supervisor sends to end a job; SIGINT is Python's own (KeyboardInterrupt).
_EXIT_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP", "SIGQUIT")
                      if hasattr(signal, n))
_fns = None


def _c():
    """Prototypes of the runtime, device and controller functions, declared once."""
    global _fns
    if _fns is not None:
        return _fns
    d = _lib.declare
    P, I, U, S = C.c_void_p, C.c_int, C.c_uint, C.c_size_t
    f = {
        "rt_config_init": d("eerl_rt_config_init", I, [I, C.POINTER(T.RtConfig), S]),
        "rt_new": d("eerl_rt_new", I, [P, C.POINTER(T.RtConfig), C.c_char_p, S, C.POINTER(P)]),
        "rt_free": d("eerl_rt_free", None, [P]),
        "rt_close": d("eerl_rt_close", I, [P]),
        "rt_phase_begin": d("eerl_rt_phase_begin", I, [P, U, I]),
        "rt_phase_end": d("eerl_rt_phase_end", I, [P, U, I]),
        "rt_sample": d("eerl_rt_sample", I, [P]),
        "rt_update_end": d("eerl_rt_update_end", I,
                           [P, C.POINTER(T.RtWork), C.POINTER(T.RtUpdateInfo)]),
        "rt_applied_setting": d("eerl_rt_applied_setting", I, [P, C.POINTER(T.Setting)]),
        "rt_phase_clock": d("eerl_rt_phase_clock", I, [P, U, I, C.POINTER(U)]),
        "rt_status": d("eerl_rt_status", I, [P, C.POINTER(T.CtlStatus)]),
        "rt_last_error": d("eerl_rt_last_error", C.c_char_p, [P]),
        "rt_save_state": d("eerl_rt_save_state", I, [P, C.c_char_p]),
        "rt_resumed": d("eerl_rt_resumed", I, [P, C.POINTER(C.c_char_p)]),
        "rt_prior": d("eerl_rt_prior", I, [P, C.POINTER(C.c_char_p)]),
        "rt_abort": d("eerl_rt_abort", I, [P, C.c_char_p, C.c_char_p]),
        "state_name": d("eerl_state_name", C.c_char_p, [I]),
        "rt_notice": d("eerl_rt_notice", C.c_char_p, [P]),
        "rt_estimate": d("eerl_rt_estimate", I, [P, C.POINTER(T.Estimate)]),
    }
    _fns = f
    return f


def _eerld_choice(eerld):
    """(eerl_rt_eerld, socket bytes or None) of Session's eerld= keyword: None auto, True on,
    False off, a socket path on at that path. The runtime decides from it (one rule:
    include/eerl/runtime.h, eerl_rt_config.eerld)."""
    if eerld is None:
        return T.RT_EERLD_AUTO, None
    if isinstance(eerld, (str, bytes, os.PathLike)):
        return T.RT_EERLD_ON, os.fsencode(eerld)
    return (T.RT_EERLD_ON if eerld else T.RT_EERLD_OFF), None


_CLOCK_FN = C.CFUNCTYPE(C.c_double, C.c_void_p)  # eerl_clock_fn
_U32_MAX = 2 ** 32 - 1
_U64_MAX = 2 ** 64 - 1
_I64_MAX = 2 ** 63 - 1


def _ranged_int(what, v, lo, hi):
    """v as an int in [lo, hi], else ValueError naming what and v. Called wherever a number
    reaches a ctypes integer field, which would otherwise wrap it silently (2**32 + 1 -> 1,
    -1 -> 4294967295). Accepts ints (and integer-valued floats, numpy ints), not bools."""
    if isinstance(v, bool):
        raise ValueError("%s must be an integer, not %r" % (what, v))
    try:
        n = operator.index(v)
    except TypeError:
        if isinstance(v, float) and v.is_integer():
            n = int(v)
        else:
            raise ValueError("%s must be an integer, not %r" % (what, v)) from None
    if not lo <= n <= hi:
        raise ValueError("%s = %d is out of range: it must be %d-%d" % (what, n, lo, hi))
    return n


def _timed(fn):
    """Counts the wall time of a session call on the caller's thread into the update's overhead
    (the outermost timed call only: metrics() inside update_end() is not counted twice)."""
    @functools.wraps(fn)
    def timed(self, *a, **k):
        if self._timing:
            return fn(self, *a, **k)
        self._timing = True
        self._call_t0 = time.perf_counter()
        try:
            return fn(self, *a, **k)
        finally:
            self._call_s += time.perf_counter() - self._call_t0
            self._calls += 1
            self._timing = False
    return timed


def _gpu_list(pools, key):
    v = pools.get(key, [])
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise ValueError("pools[%r] must be a list of GPU indices, not %r" % (key, v))
    out = []
    for g in v:
        if isinstance(g, (int, float)) and not isinstance(g, bool) and g < 0:
            raise ValueError("pools[%r]: GPU index %d is negative" % (key, g))
        try:
            out.append(_ranged_int("pools[%r] GPU index" % key, g, 0, _U32_MAX))
        except ValueError as e:
            raise ValueError("%s (pools[%r] is %r)" % (e, key, v)) from None
    if len(out) > T.RT_GPUS_LIMIT:
        raise ValueError("pools[%r]: %d GPUs, more than the %d a session takes"
                         % (key, len(out), T.RT_GPUS_LIMIT))
    return out


class _RuntimeSession:
    """What every session is, on one node or across many: one eerl_rt (the C runtime), which
    marks the phases, meters, builds each update's observation, asks the controller, applies its
    setting through the clock owner and writes the trace. A subclass sets the device the
    runtime reads (self._dev; None: the runtime opens the node's own) and calls _start; it may
    override _after_call, which runs after every call into the runtime (a session across nodes
    raises a node's failure there), and _free_device."""

    def _init_common(self):
        self._rt = None
        self._dev = None
        self._closed = True
        self._pid = os.getpid()  # a forked child's copy is inert: see close()
        self._open_phases = []
        # how the session started, kept past close(): "rt_resumed" / "rt_prior" -> (taken, why)
        self._started = {"rt_resumed": (False, ""), "rt_prior": (False, "")}
        self._update = 1  # updates are numbered from 1, as in eerl sim and the CLI
        self._last = None
        # The training loop's overhead: wall time on the caller's thread inside the session's
        # phase, update and metrics calls, per update (metrics(): eerl/overhead_s).
        self._timing = False
        self._call_t0 = 0.0
        self._call_s = 0.0
        self._calls = 0
        self._overhead = None  # (seconds, calls) of the last update
        # The run so far, for metrics() and the summary close() returns: metered energy of the
        # updates ended, how many ended, numbers skipped between them, how many the GPU slowed
        # by itself, how many came before the estimate's first counted update.
        self._run = {"energy_j": 0.0, "ended": 0, "gaps": 0, "slowed": 0, "warm": 0,
                     "last": None}
        self.summary = None  # what close() returned (api.RunSummary)
        self.allowed_loss = 0.0

    def _config(self, mode, gen, train, allowed_loss, strategy, trace, run_info, producer,
                clock=None, resume_from=None, resume_tag=None, governor_peak_mhz=0,
                meter_interval_ms=0, sample_thread=True, prior=None, job_model=None):
        """The runtime's configuration (eerl_rt_config); what its pointers point to is kept on
        self for the session's life. gen, train: device GPU indices."""
        if mode not in T.MODES:
            raise ValueError("mode %r: use one of %s" % (mode, ", ".join(T.MODES)))
        if run_info is not None and not isinstance(run_info, dict):
            raise ValueError("run_info must be a dict, not %r" % (run_info,))
        cfg = T.RtConfig()
        _lib.check(_c()["rt_config_init"](T.MODES[mode], C.byref(cfg), C.sizeof(cfg)),
                   "eerl_rt_config_init")
        # Pools of any size go through gen_pool/train_pool (eerl_rt_new copies them).
        self._keep = [(C.c_uint * max(len(gen), 1))(*gen), (C.c_uint * max(len(train), 1))(*train)]
        cfg.gen_pool = C.cast(self._keep[0], C.POINTER(C.c_uint))
        cfg.n_gen = len(gen)
        cfg.train_pool = C.cast(self._keep[1], C.POINTER(C.c_uint))
        cfg.n_train = len(train)
        options.set_rt(cfg, "allowed_loss", allowed_loss)
        options.set_rt(cfg, "strategy", T.STRATEGIES[strategy])
        self.allowed_loss = float(cfg.allowed_loss)
        cfg.observe_only = 1 if self.observe_only else 0
        self._keep += [self.trace.encode() if self.trace is not None else None,
                       json.dumps(run_info).encode() if run_info is not None else None,
                       producer.encode()]
        cfg.trace_path, cfg.trace_run_json, cfg.producer = self._keep[2:5]
        cfg.governor_peak_mhz = _ranged_int("governor_peak_mhz", governor_peak_mhz, 0, _U32_MAX)
        cfg.meter_interval_ms = _ranged_int("meter_interval_ms", meter_interval_ms, 0, _U32_MAX)
        cfg.sample_thread = 1 if sample_thread else 0
        if clock is not None:  # virtual time: the meter samples at the phase boundaries only
            self._clock_fn = _CLOCK_FN(lambda _ctx: float(clock()))
            cfg.clock = C.cast(self._clock_fn, C.c_void_p)
            cfg.sample_thread = 0
        self._keep += [os.fsencode(resume_from) if resume_from is not None else None,
                       resume_tag.encode() if resume_tag is not None else None]
        cfg.resume_from, cfg.resume_tag = self._keep[5:7]
        self._keep += [os.fsencode(prior) if prior is not None else None,
                       job_model.encode() if job_model is not None else None]
        cfg.prior, cfg.job_model = self._keep[7:9]
        return cfg

    def _start(self, cfg):
        """Opens the runtime over self._dev; frees the device when it does not open."""
        why = C.create_string_buffer(1024)
        rt = C.c_void_p()
        try:
            rc = _c()["rt_new"](self._dev, C.byref(cfg), why, len(why), C.byref(rt))
            self._after_call("the session's start")
            _lib.check(rc, "opening the eerl session", lambda: why.value)
        except BaseException:
            self._free_device()
            raise
        self._rt = rt
        self._closed = False
        self._start_info("rt_resumed")
        self._start_info("rt_prior")
        with _live_lock:
            _live.add(self)

    def _after_call(self, at):
        """Runs after every call into the runtime, before its return code is looked at."""

    def _free_device(self):
        """Frees what the subclass opened for the runtime to read."""

    def _forget_device(self):
        """A forked child's copy: drops what the subclass opened, freeing nothing."""

    # ---- phases and updates ------------------------------------------------------------------

    def _require_open(self):
        if self._pid != os.getpid():
            raise EerlError(-15, "this session belongs to process %d; a forked child (pid %d) "
                            "cannot use it: open a session of its own" % (self._pid, os.getpid()))
        if self._closed:
            raise EerlError(-15, "the session is closed")

    def _err(self):
        return _c()["rt_last_error"](self._rt)

    def _pools_for(self, key, pool):
        if pool is None:
            if self.mode == "colocated":
                return [T.POOL_GEN]
            if key == "generation":
                return [T.POOL_GEN]
            if key in ("logprob", "training"):
                return [T.POOL_TRAIN]
            return [T.POOL_GEN, T.POOL_TRAIN]  # refit and other involve both pools
        table = {"generation": [T.POOL_GEN], "training": [T.POOL_TRAIN],
                 "both": [T.POOL_GEN, T.POOL_TRAIN]}
        if pool not in table:
            raise ValueError("pool %r: use 'generation', 'training' or 'both'" % (pool,))
        if self.mode == "colocated":
            return [T.POOL_GEN]
        return table[pool]

    @_timed
    def phase_begin(self, name, pool=None):
        """Marks the start of a phase ("generation", "logprob", "training", "refit", "other";
        also "gen", "log-prob", "log_prob", "train", "update_weights"). Applies the clock eerl
        has chosen for it. pool: which pool runs it (default from the phase and the mode)."""
        self._require_open()
        key, ph = T.phase_id(name)
        pools = self._pools_for(key, pool)
        p = T.POOL_BOTH if len(pools) == 2 else pools[0]  # both pools: one boundary
        rc = _c()["rt_phase_begin"](self._rt, p, ph)
        self._after_call("the begin of phase %s" % key)
        _lib.check(rc, "beginning phase %s on %s" % (key, _pool_name(p)), self._err)
        self._open_phases.append((key, ph, pools))
        return key

    @_timed
    def phase_end(self, name, pool=None):
        self._require_open()
        key, ph = T.phase_id(name)
        pools = self._pools_for(key, pool)
        p = T.POOL_BOTH if len(pools) == 2 else pools[0]
        rc = _c()["rt_phase_end"](self._rt, p, ph)
        self._after_call("the end of phase %s" % key)
        detail = self._err() if rc < 0 else b""
        for i, (k, _, ps) in enumerate(self._open_phases):
            if k == key and ps == pools:
                del self._open_phases[i]
                break
        _lib.check(rc, "ending phase %s on %s" % (key, _pool_name(p)), lambda: detail)

    def phase(self, name, pool=None):
        """Context manager: with s.phase("generation"): ... (the phase ends even on an error)."""
        return _Phase(self, name, pool)

    @_timed
    def update_end(self, generated_tokens, valid_tokens, longest_response, policy_version=None,
                   update=None):
        """Ends one RL update with its work: G generated tokens, N valid training tokens, L tokens
        of the longest response, the policy version that generated the consumed batch (None:
        unknown). update: the framework's update number (default: counts from 1, as eerl sim,
        the CLI and the trace do). Returns an eerl.api.Update: what eerl measured and decided
        (its metrics: what metrics() reports now)."""
        self._require_open()
        for name, v in (("generated_tokens", generated_tokens), ("valid_tokens", valid_tokens),
                        ("longest_response", longest_response)):
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                try:
                    float(v)
                except (TypeError, ValueError):
                    raise ValueError("%s must be a number, not %r" % (name, v))
        w = T.RtWork()
        w.update = self._update if update is None else _ranged_int("update", update, 0, _U64_MAX)
        w.gen_tokens = float(generated_tokens)
        w.valid_tokens = float(valid_tokens)
        w.longest_tokens = float(longest_response)
        w.policy_version = (-1 if policy_version is None
                            else _ranged_int("policy_version", policy_version, -1, _I64_MAX))
        info = T.RtUpdateInfo()
        rc = _c()["rt_update_end"](self._rt, C.byref(w), C.byref(info))
        self._after_call("the end of the update")
        _lib.check(rc, "ending update %d" % w.update, self._err)
        self._update = w.update + 1
        self._last = info
        self._count_update(info)
        notice = _c()["rt_notice"](self._rt)
        if notice:  # once a run: the work does not explain the time (docs/runtime.md)
            warnings.warn("eerl: " + notice.decode(), RuntimeWarning, stacklevel=2)
        # This update's overhead ends here (its own call up to now included); the rest of this
        # call counts in the next update's.
        now = time.perf_counter()
        self._overhead = (self._call_s + (now - self._call_t0), self._calls + 1)
        self._call_s = -(now - self._call_t0)
        self._calls = -1
        m = self.metrics()
        o = info.obs
        return api.Update(
            update=int(o.update), energy_j=o.energy_j, time_s=o.time_s,
            valid_tokens=o.valid_tokens,
            energy_per_valid_token_j=m["eerl/energy_per_valid_token_j"],
            valid_tokens_per_s=m["eerl/valid_tokens_per_s"], accepted=bool(info.accepted),
            meter_flags=int(info.meter_flags), state=m["eerl/state"],
            next_setting=self.applied_setting(), metrics=m)

    def _count_update(self, info):
        r, u = self._run, int(info.obs.update)
        r["energy_j"] += info.obs.energy_j
        r["ended"] += 1
        if r["last"] is not None and u > r["last"] + 1:
            r["gaps"] += u - r["last"] - 1
        r["last"] = u
        if info.meter_flags & _summary.METER_SELF_SLOWED:
            r["slowed"] += 1
        elif u < 2:  # the estimate counts from update 2 (EERL__EST_FIRST)
            r["warm"] += 1

    def estimate(self):
        """What eerl saved on the run so far, estimated from the run alone: an
        eerl.api.Estimate (docs/what-eerl-did.md)."""
        self._require_open()
        e = T.Estimate()
        _lib.check(_c()["rt_estimate"](self._rt, C.byref(e)), "the run's estimate", self._err)
        return _summary.estimate_of(e)

    def sample(self):
        """Takes a meter sample now. Only for a session given a clock (virtual time), whose
        meter has no sampler thread: a simulator calls it as its time goes on (eerl sim
        samples every virtual second), as the thread does every 200 ms in real time."""
        self._require_open()
        rc = _c()["rt_sample"](self._rt)
        self._after_call("a meter sample")
        _lib.check(rc, "meter sample", self._err)

    def save_state(self, path):
        """Saves the controller's learned state (governor references, the lock) for a later
        Session(resume_from=...). path: a file, or the training checkpoint's directory (which
        gets eerl-controller.state). Call it where the framework saves its checkpoint; the file
        is replaced atomically. Call it before close(). Returns
        the file written."""
        if self._rt is None:
            raise EerlError(-15, "the session is closed")
        p = os.fspath(path)
        _lib.check(_c()["rt_save_state"](self._rt, os.fsencode(p)),
                   "saving the controller state to %s" % p, self._err)
        return os.path.join(p, "eerl-controller.state") if os.path.isdir(p) else p

    @property
    def resumed(self):
        """True when the controller started from a saved state (resume_from)."""
        return self._start_info("rt_resumed")[0]

    @property
    def resume_detail(self):
        """Why the session resumed or started fresh ("" without resume_from)."""
        return self._start_info("rt_resumed")[1]

    @property
    def prior_taken(self):
        """True when the controller took a prior from earlier jobs (Session(prior=...)): their
        setting is its first candidate once calibrated. Whether it was verified or refused then
        is in the trace's events ("prior's setting verified", "prior refused: ...")."""
        return self._start_info("rt_prior")[0]

    @property
    def prior_detail(self):
        """What the prior held and matched, or why it was not taken ("" without a prior)."""
        return self._start_info("rt_prior")[1]

    def _start_info(self, fn):
        """(taken, why) from the runtime's rt_resumed or rt_prior, or as read before close()."""
        if self._rt is None:
            return self._started[fn]
        d = C.c_char_p()
        r = _c()[fn](self._rt, C.byref(d))
        _lib.check(r if r < 0 else 0, {"rt_resumed": "resume", "rt_prior": "prior"}[fn] + " status",
                   self._err)
        self._started[fn] = (r == 1, (d.value or b"").decode(errors="replace"))
        return self._started[fn]

    def applied_setting(self):
        """The eerl.api.Setting applied from the next phase boundary (0: the governor)."""
        self._require_open()
        s = T.Setting()
        _lib.check(_c()["rt_applied_setting"](self._rt, C.byref(s)), "applied setting", self._err)
        return _setting(s)

    def status(self):
        """The controller's eerl.api.Status: state, lock, requested setting, counts."""
        self._require_open()
        st = T.CtlStatus()
        _lib.check(_c()["rt_status"](self._rt, C.byref(st)), "session status", self._err)
        return api.Status(
            state=_c()["state_name"](st.state).decode(), locked=bool(st.locked),
            locked_setting=_setting(st.locked_setting) if st.locked else None,
            requested=_setting(st.setting), observed=st.observed, rejected=st.rejected,
            trials=st.trials, refreshes=st.refreshes, references=st.references)

    @_timed
    def metrics(self):
        """Figures for the framework's logger, with "eerl/" keys: energy per valid token and the
        update's energy, time and throughput (after the first update_end), the clocks applied
        from now on (0 = governor), the controller's state and counts, and the session's own
        cost on the caller's thread: eerl/overhead_s, the wall time spent in the session's phase,
        update and metrics calls from the previous update's end to this one's (eerl/overhead_calls
        calls), and eerl/overhead_pct, that time as a percentage of the update's.
        Also: per phase the update ran, eerl/<phase>_energy_j, _time_s and _power_w (its mean
        power); eerl/energy_total_j, the metered energy of every update so far; the run's
        estimate so far (summary.estimate_metrics: eerl/saving_pct with eerl/saving_lo_pct and
        eerl/saving_hi_pct, its 90% interval, ...); eerl/state_code, the state as a number
        (the index in eerl._types.STATES) for loggers that take numbers only.
        docs/what-eerl-did.md lists every key."""
        st = self.status()
        s = self.applied_setting()
        m = {
            "eerl/state": st["state"],
            "eerl/state_code": T.STATES.index(st["state"]) if st["state"] in T.STATES else -1,
            "eerl/locked": int(st["locked"]),
            "eerl/gen_mhz": s["gen_mhz"],
            "eerl/train_mhz": s["train_mhz"],
            "eerl/idle_mhz": s["idle_mhz"],
            "eerl/observed": st["observed"],
            "eerl/rejected": st["rejected"],
            "eerl/trials": st["trials"],
        }
        info = self._last
        if info is not None:
            o = info.obs
            m.update({
                "eerl/update": int(o.update),
                "eerl/update_energy_j": o.energy_j,
                "eerl/update_time_s": o.time_s,
                "eerl/energy_per_valid_token_j": (o.energy_j / o.valid_tokens
                                                  if o.valid_tokens > 0 else float("nan")),
                "eerl/valid_tokens_per_s": (o.valid_tokens / o.time_s
                                            if o.time_s > 0 else float("nan")),
                "eerl/accepted": int(info.accepted),
                "eerl/meter_flags": int(info.meter_flags),
                "eerl/energy_total_j": self._run["energy_j"],
            })
            for name, k in T.PHASES.items():
                t, e = o.phase_time_s[k], o.phase_energy_j[k]
                if t > 0:
                    m.update({"eerl/%s_energy_j" % name: e, "eerl/%s_time_s" % name: t,
                              "eerl/%s_power_w" % name: e / t})
            est = self.estimate()
            if est is not None:
                m.update(_summary.estimate_metrics(est))
        if self._overhead is not None:
            sec, calls = self._overhead
            t = info.obs.time_s if info is not None else 0.0
            m.update({
                "eerl/overhead_s": sec,
                "eerl/overhead_calls": calls,
                "eerl/overhead_pct": 100.0 * sec / t if t > 0 else float("nan"),
            })
        return m

    # ---- lifetime ----------------------------------------------------------------------------

    @property
    def closed(self):
        return self._closed

    def close(self):
        """Restores every clock the session changed, stops its meter, closes the trace, releases
        the device (and eerld's lease). Returns what eerl did on the run, an eerl.api.RunSummary
        (its line: energy used, the estimated saving with its interval, the throughput change,
        whether the allowance was kept, the updates not judged; docs/what-eerl-did.md), also
        kept as self.summary. Idempotent (a second close returns the same). Raises EerlError if
        a restore failed (the session is closed all the same, self.summary set). In a forked
        child it only marks the child's copy closed and returns None: the parent's clocks,
        thread, trace and lease are left alone."""
        if self._closed:
            return self.summary
        self._closed = True
        with _live_lock:
            _live.discard(self)
        if self._pid != os.getpid():
            # A forked child's copy (os.fork, a fork-started worker): the clocks, the meter's
            # thread, the trace and the eerld lease are the parent's. Nothing is restored or
            # freed; libeerl already closed the child's copy of the eerld socket at the fork.
            self._rt = self._dev = None
            self._forget_device()
            return
        f = _c()
        self.summary = self._run_summary()
        rc = f["rt_close"](self._rt)
        detail = f["rt_last_error"](self._rt) if rc < 0 else b""
        f["rt_free"](self._rt)
        self._rt = None
        self._free_device()
        self._after_call("the session's close")
        _lib.check(rc, "closing the eerl session", lambda: detail)
        return self.summary

    def _run_summary(self):
        e = T.Estimate()
        est = _summary.estimate_of(e) if _c()["rt_estimate"](self._rt, C.byref(e)) == 0 else None
        r = self._run
        return _summary.run_summary(r["energy_j"], r["ended"], r["gaps"], r["slowed"], r["warm"],
                                    self.allowed_loss, self.observe_only, est)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            if not self._closed:
                self.close()
        except Exception:
            pass  # nothing to report to at collection time; the clocks were still reset



class Session(_RuntimeSession):
    """One RL job's eerl session. See docs/python.md.

    mode: "colocated", "disaggregated", "drained" or "inflight".
    pools: {"generation": [gpu, ...], "training": [gpu, ...]} (device indices on this node;
        colocated: the same list twice, or only one of them).
    allowed_loss: throughput may fall to (1 - allowed_loss) of the governor's; None: the
        table's default (eerl.options.default("allowed_loss"), 0.02), bounds (0, 0.5).
    observe_only: measure, decide and trace, but never change a clock (needs no privilege).
    trace: path of the JSON-lines trace (docs/trace-format.md), or None.
    strategy: "eerl" (the default, None, here, in the C API and in `eerl sim`: it saves the most
        within the allowance and resumes), "paper" (the paper's own controller) or a baseline
        ("governor", "global-clock", "linear-search").
    run_info: a dict merged into the trace's "run" line (model, framework, ...).
    eerld: None (auto: through eerld when $EERL_SOCKET is set or its default socket exists),
        True (must), False (never; NVML in-process, needs root to lock clocks), or a socket path
        (must, there). The runtime decides by this one rule (docs/eerld.md, "When a session goes
        through eerld"); through eerld, the session reads its GPUs through eerld too, and an
        observe_only session takes no lease.
    install_sigterm: install the handler for SIGTERM, SIGHUP and SIGQUIT described in the
        module's docstring.
    resume_from: a controller state saved by save_state() (the file, or the checkpoint directory
        holding eerl-controller.state), or None. The controller then skips calibration and
        search and starts at the saved lock. A missing file, or a state learned on another GPU
        model, allocation, clock list, mode, strategy, configuration or eerl version, starts a
        fresh search instead: resumed is False and resume_detail says why (so do the trace and
        the first update's events). A damaged or unreadable file raises EerlError naming it.
        Only strategy "eerl" resumes (in every mode); the others start fresh and say so.
    resume_tag: the hardware identity saved states are matched on; None: the first GPU's model
        and the pool sizes, then job_model when given.
    prior: what earlier jobs of this model on these GPUs saved (docs/controller.md "Starting
        from earlier jobs: the prior"): a state saved by save_state(), or a directory of them
        (files named *.state, and each subdirectory's eerl-controller.state: the checkpoint
        directories of earlier jobs). The entries of this job's key (resume_tag's GPU model and
        pool sizes, job_model, the mode, strategy and configuration) give the setting the job
        verifies after its own calibration instead of searching; prior_taken and prior_detail
        say what was taken, the trace whether it was verified or refused. No matching entry: a
        fresh search, said in prior_detail and the trace. A path that does not exist, or an entry
        that is not a saved state, raises EerlError naming it; so does prior with resume_from.
    job_model: the model the job trains, by the user's name ("qwen3-30b-a3b"): part of the key
        of the states it saves and the priors it takes. None: not part of the key.
    clock: None (real time), or a function returning the time in seconds, never going back: the
        session then runs in that (e.g. a simulator's virtual) time, its meter reading the
        counters at the phase boundaries only.
    """

    def __init__(self, mode="colocated", pools=None, allowed_loss=None, observe_only=False,
                 trace=None, strategy=None, run_info=None, governor_peak_mhz=0,
                 meter_interval_ms=0, eerld=None, install_sigterm=True, resume_from=None,
                 resume_tag=None, clock=None, prior=None, job_model=None):
        self._init_common()
        # The options first, before the device or eerld is asked anything.
        o = options.check_keywords({"allowed_loss": allowed_loss, "strategy": strategy},
                                   "eerl.Session")
        allowed_loss, strategy = o["allowed_loss"], o["strategy"]
        if mode not in T.MODES:
            raise ValueError("mode %r: use one of %s" % (mode, ", ".join(T.MODES)))
        if pools is None:
            pools = {"generation": [0], "training": [0]}
        if not isinstance(pools, dict):
            raise ValueError("pools must be a dict like {'generation': [0, 1], 'training': [0, 1]}"
                             ", not %r" % (pools,))
        bad = set(pools) - {"generation", "training"}
        if bad:
            raise ValueError("pools has unknown key(s) %s: use 'generation' and 'training'"
                             % ", ".join(sorted(map(repr, bad))))
        gen, train = _gpu_list(pools, "generation"), _gpu_list(pools, "training")
        if mode == "colocated":
            gen = gen or train
            train = train or gen
            if sorted(gen) != sorted(train):
                raise ValueError("colocated: generation and training share one pool, but got "
                                 "generation %s and training %s" % (gen, train))
        if not gen or not train:
            raise ValueError("%s: both pools need GPUs, got generation %s and training %s"
                             % (mode, gen, train))
        self.mode = mode
        self.pools = {"generation": gen, "training": train}
        self.observe_only = bool(observe_only)
        self.trace = os.fspath(trace) if trace is not None else None
        cfg = self._config(mode, gen, train, allowed_loss, strategy, trace, run_info,
                           "eerl %s python" % _lib.__version__, clock=clock,
                           resume_from=resume_from, resume_tag=resume_tag,
                           governor_peak_mhz=governor_peak_mhz,
                           meter_interval_ms=meter_interval_ms, prior=prior, job_model=job_model)
        cfg.eerld, self._socket = _eerld_choice(eerld)
        cfg.eerld_socket = self._socket
        self._start(cfg)  # self._dev None: the runtime opens this node's GPUs
        if install_sigterm:
            _install_sigterm()

    def __repr__(self):
        return "<eerl.Session %s %s%s>" % (self.mode, self.pools,
                                          " closed" if self._closed else "")


def _setting(s):
    """eerl.api.Setting of a C eerl_setting."""
    return api.Setting(gen_mhz=s.mhz[0], train_mhz=s.mhz[1], idle_mhz=s.idle_mhz)


def _pool_name(p):
    return {T.POOL_GEN: "the generation pool", T.POOL_TRAIN: "the training pool"}.get(
        p, "both pools")


class _Phase:
    __slots__ = ("s", "name", "pool")

    def __init__(self, s, name, pool):
        self.s, self.name, self.pool = s, name, pool

    def __enter__(self):
        self.s.phase_begin(self.name, self.pool)
        return self.s

    def __exit__(self, et, ev, tb):
        if et is None:
            self.s.phase_end(self.name, self.pool)
        else:
            try:  # the body's error is the one to see
                self.s.phase_end(self.name, self.pool)
            except EerlError:
                pass
        return False


def live_sessions():
    """The sessions open in this process (for tests and for the shutdown paths)."""
    with _live_lock:
        return list(_live)


def close_all():
    """Closes every live session; returns the first error raised (or None)."""
    first = None
    for s in live_sessions():
        try:
            s.close()
        except Exception as e:  # keep closing the others
            first = first or e
    return first


def _on_exit_signal(signum, frame):
    prev = _sig_previous.get(signum)
    if callable(prev):
        # The program's own handler decides what the signal means (checkpoint and exit, or go
        # on); the sessions stay open for it and close on the program's way out.
        prev(signum, frame)
        return
    close_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_sigterm():
    """Installs _on_exit_signal for each of _EXIT_SIGNALS (see the module's docstring)."""
    global _sig_installed
    if _sig_installed or threading.current_thread() is not threading.main_thread():
        return
    for sig in _EXIT_SIGNALS:
        prev = signal.getsignal(sig)
        if prev is signal.SIG_IGN or prev is None:
            continue  # the program ignores it (or set it outside Python): leave it alone
        _sig_previous[sig] = prev if callable(prev) else None
        signal.signal(sig, _on_exit_signal)
    _sig_installed = True


atexit.register(close_all)
