"""What the framework integrations share: turning a framework's nested, named timers into eerl
phases, and keeping a framework run alive when eerl fails.

PhaseDriver owns no eerl handle; it borrows a Session (or anything with phase_begin/phase_end).
Only the outermost mapped timer is a phase: a framework's timers nest ("step" > "gen", or
"prepare_for_generation/total" > "prepare_for_generation/transfer_and_update_weights"), while an
eerl pool is in one phase at a time. An optional base phase runs whenever no mapped timer does
(TRL: the optimizer step is training except where generation, log-prob or refit interrupt it).

Errors: a hook runs inside the framework's loop. strict=True lets an EerlError propagate (and
stop the run); strict=False (the default) turns it into one RuntimeWarning per distinct message
and counts it (errors), so a clock-control failure never kills a multi-day run silently or loudly.
"""

import warnings

from .._lib import EerlError


class PhaseDriver:
    def __init__(self, session, strict=False):
        self.session = session
        self.strict = strict
        self.errors = 0
        self._seen = set()
        self._stack = []  # (label, phase or None, owner: True when this entry began the phase)
        self._active = None  # phase name now begun by us (outermost mapped), or None
        self._active_pool = None
        self._base = None  # base phase wanted when nothing else runs
        self._base_on = False
        self._base_nest = 0  # open timers covered by the running base phase

    # ---- error policy -------------------------------------------------------------------------

    def call(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except EerlError as e:
            self.errors += 1
            if self.strict:
                raise
            msg = str(e)
            if msg not in self._seen:
                self._seen.add(msg)
                warnings.warn("eerl: %s (the run continues; strict=True makes this fatal)" % msg,
                              RuntimeWarning, stacklevel=3)
            return None

    # ---- phases ---------------------------------------------------------------------------------

    def _begin(self, phase, pool=None):
        if pool is None:
            self.call(self.session.phase_begin, phase)
        else:
            self.call(self.session.phase_begin, phase, pool)

    def _end(self, phase, pool=None):
        if pool is None:
            self.call(self.session.phase_end, phase)
        else:
            self.call(self.session.phase_end, phase, pool)

    def enter(self, label, phase, pool=None):
        """A framework timer named label starts; phase is its eerl phase or None (not ours);
        pool: the pool that runs it (None: the session's default for the phase)."""
        owner = False
        if phase is not None and self._base_on and phase == self._base and self._active is None:
            owner = "base"  # already running as the base phase: it covers what nests inside
            self._base_nest += 1
        elif phase is not None and self._active is None and self._base_nest == 0:
            if self._base_on:
                self._end(self._base)
                self._base_on = False
            self._begin(phase, pool)
            self._active = phase
            self._active_pool = pool
            owner = True
        self._stack.append((label, phase, owner))

    def exit(self, label):
        """The timer named label stops (the innermost open one with that label)."""
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i][0] == label:
                _, phase, owner = self._stack.pop(i)
                break
        else:
            return  # a stop we never saw start (the hook was installed mid-timer)
        if owner == "base":
            self._base_nest = max(0, self._base_nest - 1)
        elif owner:
            self._end(phase, self._active_pool)
            self._active = None
            self._resume_base()

    def _resume_base(self):
        if self._base is not None and not self._base_on and self._active is None:
            self._begin(self._base)
            self._base_on = True

    def set_base(self, phase):
        """phase runs whenever no mapped timer does (None: no base phase)."""
        if self._base_on and phase != self._base:
            self._end(self._base)
            self._base_on = False
        self._base = phase
        self._resume_base()

    @property
    def active(self):
        return self._active or (self._base if self._base_on else None)

    def close_all(self):
        """Ends whatever phase is open (an update must not end inside a phase)."""
        if self._active is not None:
            self._end(self._active, self._active_pool)
            self._active = None
        if self._base_on:
            self._end(self._base)
            self._base_on = False
        self._base = None
        self._base_nest = 0
        self._stack = [(l, p, False) for (l, p, _) in self._stack]


def numeric_metrics(session):
    """session.metrics() without the text entries (loggers want numbers)."""
    return {k: v for k, v in session.metrics().items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def token_counts(response_mask):
    """(G, N, L) from a [batch, response_len] 0/1 mask of response tokens (torch or numpy):
    every masked token was generated and is consumed by the loss."""
    lengths = response_mask.sum(-1)
    count = int(lengths.numel()) if hasattr(lengths, "numel") else int(lengths.size)
    if count == 0:
        return 0.0, 0.0, 0.0
    total = float(lengths.sum())
    return total, total, float(lengths.max())
