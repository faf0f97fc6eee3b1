"""Stand-in of nemo_rl.utils.timer (eerl's, tests only): the Timer of each revision eerl follows.

ReleaseTimer is the Timer of tag v0.7.0 (81aa43d, 2026-07-29; nemo_rl/utils/timer.py last changed
there in b74c5d0, 2025-08-05): Timer() takes no arguments; start(label) / stop(label) / time(label)
record durations and log nothing. A hook sees its stages only by wrapping start and stop (the
durations reach the Logger afterwards, as the "timing/train" metrics).

MainTimer is the Timer of main at 7ea279a (2026-08-22; the file last changed in 1687d23,
2026-07-08): Timer(context=None) adds "hostname" to the context, and start / stop / record / mark
log at DEBUG on the logger "nemo_rl.utils.timer":
    "[k=v ...] LABEL start ts=2026-01-01T00:00:00.000000Z"
    "[k=v ...] LABEL end elapsed=0.1234s ts=..."
    "[k=v ...] LABEL record elapsed=0.1234s ts=..."     "[k=v ...] LABEL mark ts=..."
(the bracket is left out when the context is empty). ThreadSafeTimer (main only) locks around
them and calls Timer's methods through super().

Timer is one of the two, as nemo_rl._standin.select() chose (main by default). Only what the
integration and the stand-in's GRPO loops use is here (no get_elapsed, reduce by label, ...).
"""

import datetime
import logging
import socket
import threading
import time
from contextlib import contextmanager

logger = logging.getLogger(__name__)

_REDUCE = {
    "sum": sum,
    "mean": lambda v: sum(v) / len(v),
    "max": max,
    "min": min,
    "count": len,
}


class _Durations:
    """What both revisions share: durations per label, reduced for get_timing_metrics."""

    def _init_durations(self):
        self._timers = {}
        self._start_times = {}

    def get_timing_metrics(self, reduction_op="mean"):
        if isinstance(reduction_op, str):
            reduction_op = {label: reduction_op for label in self._timers}
        out = {}
        for label, values in self._timers.items():
            op = reduction_op.get(label)
            out[label] = _REDUCE[op](values) if op in _REDUCE else list(values)
        return out

    def reset(self, label=None):
        if label:
            self._timers.pop(label, None)
            self._start_times.pop(label, None)
        else:
            self._timers, self._start_times = {}, {}


class ReleaseTimer(_Durations):
    """v0.7.0's Timer: no context, no log lines."""

    def __init__(self):
        self._init_durations()

    def start(self, label):
        if label in self._start_times:
            raise ValueError(f"Timer '{label}' is already running")
        self._start_times[label] = time.perf_counter()

    def stop(self, label):
        if label not in self._start_times:
            raise ValueError(f"Timer '{label}' is not running. "
                             f"Running times: {self._start_times.keys()}")
        elapsed = time.perf_counter() - self._start_times.pop(label)
        self._timers.setdefault(label, []).append(elapsed)
        return elapsed

    @contextmanager
    def time(self, label):
        self.start(label)
        try:
            yield
        finally:
            self.stop(label)


class MainTimer(_Durations):
    """main's Timer: a context and a DEBUG line per event."""

    def __init__(self, context=None):
        self._init_durations()
        self._markers = {}
        self._context = context or {}
        if "hostname" not in self._context:
            self._context["hostname"] = socket.gethostname()

    def _fmt(self, label, event):
        ts = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        if self._context:
            prefix = " ".join(f"{k}={v}" for k, v in self._context.items())
            return f"[{prefix}] {label} {event} ts={ts}"
        return f"{label} {event} ts={ts}"

    def start(self, label, should_log=True):
        if label in self._start_times:
            raise ValueError(f"Timer '{label}' is already running")
        self._start_times[label] = time.perf_counter()
        if should_log:
            logger.debug(self._fmt(label, "start"))

    def stop(self, label, should_log=True):
        if label not in self._start_times:
            raise ValueError(f"Timer '{label}' is not running. "
                             f"Running times: {self._start_times.keys()}")
        elapsed = time.perf_counter() - self._start_times.pop(label)
        self._timers.setdefault(label, []).append(elapsed)
        if should_log:
            logger.debug(self._fmt(label, f"end elapsed={elapsed:.4f}s"))
        return elapsed

    def record(self, label, elapsed):
        self._timers.setdefault(label, []).append(elapsed)
        logger.debug(self._fmt(label, f"record elapsed={elapsed:.4f}s"))

    def mark(self, label, metadata=None):
        ts = time.time()
        self._markers.setdefault(label, []).append((ts, metadata))
        logger.debug(self._fmt(label, f"mark meta={metadata}" if metadata else "mark"))
        return ts

    @contextmanager
    def time(self, label, should_log=True):
        self.start(label, should_log)
        try:
            yield
        finally:
            self.stop(label, should_log)

    def reset(self, label=None):
        super().reset(label)
        if label:
            self._markers.pop(label, None)
        else:
            self._markers = {}


class ThreadSafeTimer(MainTimer):
    """main only: MainTimer under a lock, through super()."""

    def __init__(self, context=None):
        super().__init__(context=context)
        self._lock = threading.RLock()

    def start(self, label, should_log=True):
        with self._lock:
            super().start(label, should_log)

    def stop(self, label, should_log=True):
        with self._lock:
            return super().stop(label, should_log)


Timer = MainTimer
