"""Stand-in of verl.utils.debug (re-exports marked_timer, as verl does)."""
import time
from contextlib import contextmanager


@contextmanager
def marked_timer(name, timing_raw, color=None, domain=None, category=None):
    start = time.perf_counter()
    try:
        yield
    finally:
        timing_raw[name] = timing_raw.get(name, 0.0) + time.perf_counter() - start
