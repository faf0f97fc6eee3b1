"""Stand-in of nemo_rl.utils.timer.Timer: start/stop/time and the DEBUG lines they log, in the
same format ("[k=v ...] LABEL start ts=..." / "... LABEL end elapsed=X.XXXXs ts=...")."""
import datetime
import logging
import socket
import time
from contextlib import contextmanager

logger = logging.getLogger(__name__)


class Timer:
    def __init__(self, context=None):
        self._timers = {}
        self._start_times = {}
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
            raise ValueError(f"Timer '{label}' is not running. Running times: {self._start_times.keys()}")
        elapsed = time.perf_counter() - self._start_times[label]
        self._timers.setdefault(label, []).append(elapsed)
        del self._start_times[label]
        if should_log:
            logger.debug(self._fmt(label, f"end elapsed={elapsed:.4f}s"))
        return elapsed

    @contextmanager
    def time(self, label, should_log=True):
        self.start(label, should_log)
        try:
            yield
        finally:
            self.stop(label, should_log)

    def reset(self, label=None):
        self._timers, self._start_times = {}, {}
