"""What the framework integrations share: turning a framework's nested, named timers into eerl
phases, keeping a framework run alive when eerl fails, and failing loudly when the hook sees
nothing.

PhaseDriver owns no eerl handle; it borrows a Session (or anything with phase_begin/phase_end).
Only the outermost mapped timer is a phase: a framework's timers nest ("step" > "gen", or
"prepare_for_generation/total" > "prepare_for_generation/transfer_and_update_weights"), while an
eerl pool is in one phase at a time. An optional base phase runs whenever no mapped timer does
(TRL: the optimizer step is training except where generation, log-prob or refit interrupt it).

Errors: a hook runs inside the framework's loop. strict=True lets an EerlError (or an OSError:
a multi-node session's trace on a full disk, its connection to a node) propagate (and stop the
run); strict=False (the default) turns it into one RuntimeWarning per distinct message and counts
it (errors), so a clock-control failure never kills a multi-day run silently or loudly.

Failing loudly (every integration does both):

    fw = Framework("verl", dist="verl", hooks="verl's marked_timer stages", doc="docs/integrations/verl.md")
    fw.require({"verl.trainer.ppo.ray_trainer.marked_timer": hasattr(m, "marked_timer"), ...})
        # in install(): raises IntegrationError naming the framework, its version and every
        # hook point that is absent (any_of=True: only when all of them are)
    driver = PhaseDriver(session, strict=strict, framework=fw, expect=("generation",))
    driver.update_end(generated_tokens=G, valid_tokens=N, longest_response=L, policy_version=v)
        # ends open phases, checks the update, records it, then reports the check: an update in
        # which no hooked timer ran (or one of expect did not) raises IntegrationError (strict)
        # or warns once (RuntimeWarning), naming the framework, its version, what was missing
        # and the unmapped timer names it did see (a renamed hook point shows there)

The update is recorded before the check raises, so the trace keeps it (as "other" time); a first
update in which no phase began at all the runtime refuses (it has no start time), and the check's
finding says so in place of the runtime's EERL_ESTATE.
driver.saw(phase) counts a phase the integration begins itself on a framework signal (not
through enter()); driver.warn_once(msg) reports any other finding about the framework by the
same rule (strict: IntegrationError; else one RuntimeWarning per message).
"""

import importlib.metadata
import inspect
import os
import warnings

from .._lib import EerlError

# What each session type takes, the one table every integration uses (mode and pools come from
# the framework; adapter is the integration's): session_keywords() eerl.Session's,
# multinode_keywords() MultiNodeSession's, and SINGLE_NODE_ONLY the Session keywords that have
# no meaning across nodes, with why (every other one works on many nodes).
SINGLE_NODE_ONLY = {
    "eerld": "across nodes eerl reaches each node's eerld at its default socket ($EERL_SOCKET "
             "of the node's processes)",
    "meter_interval_ms": "across nodes the meter reads every GPU at the phase boundaries",
}
_FOUND = ("self", "mode", "pools", "adapter")


def session_keywords():
    import eerl
    return [p for p in inspect.signature(eerl.Session.__init__).parameters if p not in _FOUND]


def multinode_keywords():
    from ..multinode import MultiNodeSession
    return [p for p in inspect.signature(MultiNodeSession.__init__).parameters
            if p not in _FOUND]


def spans_nodes_by_env():
    """Whether the launcher's environment says the job spans several nodes (torchrun and
    accelerate launch set WORLD_SIZE and LOCAL_WORLD_SIZE); False where it does not say."""
    try:
        return int(os.environ["WORLD_SIZE"]) > int(os.environ["LOCAL_WORLD_SIZE"])
    except (KeyError, ValueError):
        return False


def _default(key, v):
    return v is None or v is True if key == "eerld" else v == 0


def single_node_only(keywords, where):
    """TypeError naming the first of keywords ({name: value}) that cannot work across nodes
    (given with another value than its default: eerld=None or True reaches each node's own),
    where: the job, in words; or None."""
    bad = sorted(k for k, v in keywords.items() if k in SINGLE_NODE_ONLY and not _default(k, v))
    if not bad:
        return None
    return TypeError("eerl: %s=: %s spans several nodes, and %s: leave it out"
                     % (bad[0], where, SINGLE_NODE_ONLY[bad[0]]))

_ESTATE = -15  # EERL_ESTATE: the runtime refuses the call in the session's state


def _raise(e):
    raise e


class IntegrationError(RuntimeError):
    """An integration found nothing (or not all it needs) to hook, or an update ended without the
    phases it expected. framework: the name ("TRL"); version: the installed version; missing:
    what was absent, in words (a list)."""

    def __init__(self, message, framework=None, version=None, missing=()):
        RuntimeError.__init__(self, message)
        self.framework = framework
        self.version = version
        self.missing = list(missing)


def version_of(dist, module=None):
    """The installed version of distribution dist ("trl"), else module.__version__, else
    "(version unknown)"."""
    try:
        return importlib.metadata.version(dist)
    except Exception:
        pass
    v = getattr(module, "__version__", None)
    return str(v) if v else "(version unknown)"


class Framework:
    """Who an integration hooks, for its refusals and warnings.

    name: what a user calls it ("TRL"); dist: its distribution name, for the version (or pass
    version=); hooks: what the integration hooks, in words ("TRL's ProfilingContext blocks");
    tested: the version(s) the integration is tested against; doc: where its page is."""

    def __init__(self, name, dist=None, module=None, version=None, hooks="", tested="", doc=""):
        self.name = name
        self.version = version if version is not None else (
            version_of(dist, module) if dist else "(version unknown)")
        self.hooks = hooks
        self.tested = tested
        self.doc = doc

    def __str__(self):
        return "%s %s" % (self.name, self.version)

    def _known(self):
        parts = []
        if self.tested:
            parts.append("the integration is tested against %s %s" % (self.name, self.tested))
        if self.doc:
            parts.append("see %s" % self.doc)
        return ("; ".join(parts) + ".") if parts else ""

    def refuse(self, missing, what="has no"):
        """Raises IntegrationError: "<name> <version> has no <missing, ...>: ..."."""
        missing = [missing] if isinstance(missing, str) else list(missing)
        raise IntegrationError("eerl: %s %s %s: there is nothing for eerl to hook there. %s"
                               % (self, what, ", ".join(missing), self._known()),
                               self.name, self.version, missing)

    def require(self, hooks, any_of=False):
        """hooks: {hook point, in words: present (bool)}. Refuses (IntegrationError) when one is
        absent, or with any_of=True when every one is."""
        absent = [k for k, ok in hooks.items() if not ok]
        if absent and (not any_of or len(absent) == len(hooks)):
            self.refuse(absent)


class PhaseDriver:
    """Timers -> phases for one session. framework (a Framework) and expect (phases every update
    must contain) turn on the per-update check of update_end(); without a framework only "no
    phase at all" is checked, and named as "the framework"."""

    def __init__(self, session, strict=False, framework=None, expect=()):
        self.session = session
        self.strict = strict
        self.framework = framework
        self.expect = tuple(expect)
        self.errors = 0
        self.blind_updates = 0  # updates that ended without a hooked phase (or an expected one)
        self._seen = set()
        self._update_seen = set()  # phases whose timers ran in this update
        self._unmapped = []  # timer labels seen in this update that map to no phase (first 8)
        self._updates = 0
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
        except (EerlError, OSError) as e:
            self.errors += 1
            if self.strict:
                raise
            msg = str(e)
            if msg not in self._seen:
                self._seen.add(msg)
                warnings.warn("eerl: %s (the run continues; strict=True makes this fatal)" % msg,
                              RuntimeWarning, stacklevel=3)
            return None

    def warn_once(self, msg, missing=(), key=None):
        """A finding about the framework (not an eerl error): raises IntegrationError (strict) or
        warns once per distinct key (default: the message)."""
        fw = self.framework
        if self.strict:
            raise IntegrationError(msg, fw.name if fw else None, fw.version if fw else None,
                                   missing)
        key = msg if key is None else key
        if key not in self._seen:
            self._seen.add(key)
            warnings.warn(msg + " (strict=True makes this fatal; warned once)", RuntimeWarning,
                          stacklevel=3)

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
        if phase is not None:
            self._update_seen.add(phase)
        elif len(self._unmapped) < 8 and label not in self._unmapped:
            self._unmapped.append(label)
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
        """The timer named label stops (the innermost open one with that label). Returns False
        when no open timer has that label."""
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i][0] == label:
                _, phase, owner = self._stack.pop(i)
                break
        else:
            return False  # a stop we never saw start (the hook was installed mid-timer)
        if owner == "base":
            self._base_nest = max(0, self._base_nest - 1)
        elif owner:
            self._end(phase, self._active_pool)
            self._active = None
            self._resume_base()
        return True

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

    def saw(self, phase):
        """Records that the framework ran phase in this update without a timer enter()ed here
        (a phase the integration begins itself on a framework signal)."""
        self._update_seen.add(phase)

    # ---- update end and its check ---------------------------------------------------------

    def update_end(self, **kwargs):
        """Ends every open phase, checks the update (check first: an update in which no hooked
        timer ran, or one of expect did not, is named with what was seen), records it with
        session.update_end(**kwargs), then reports the finding: IntegrationError (strict) or one
        RuntimeWarning per distinct finding. The update is recorded before the finding raises, so
        the trace keeps it (as "other" time); when the session refuses it because no phase ever
        began (the runtime has no start time for a first update without a phase), the finding
        says so instead of the runtime's EERL_ESTATE. Other eerl errors, and an OSError (a
        multi-node session's trace on a full disk), follow the error policy (call()). Returns what session.update_end returned (None when it was not recorded)."""
        self.set_base(None)
        self.close_all()
        finding = self._finding()
        r = err = None
        try:
            r = self.session.update_end(**kwargs)
        except (EerlError, OSError) as e:
            err = e
        refused = (err is not None and finding is not None and finding[2]
                   and getattr(err, "code", None) == _ESTATE)
        if finding is not None:
            msg, missing, _ = finding
            if refused:
                msg += " The update was not recorded: %s." % err
            self.warn_once(msg, missing, key=("blind",) + tuple(missing))
        if err is not None and not refused:
            self.call(_raise, err)
        return r

    def check_update(self):
        """Checks the update just ended and starts the next one's record: no hooked phase seen,
        or an expected phase missing, raises IntegrationError (strict) or warns once per distinct
        finding (RuntimeWarning) and counts blind_updates. (update_end() does this itself.)"""
        finding = self._finding()
        if finding is not None:
            msg, missing, _ = finding
            self.warn_once(msg, missing, key=("blind",) + tuple(missing))

    def _finding(self):
        """What check_update reports for the update now ending, as (message, missing, no phase
        at all), or None when it saw what it expects; counts the update (and a blind one) and
        starts the next update's record."""
        self._updates += 1
        seen, unmapped = self._update_seen, self._unmapped
        self._update_seen, self._unmapped = set(), []
        fw = self.framework
        who = str(fw) if fw is not None else "the framework"
        if not seen:
            missing = [fw.hooks if fw is not None and fw.hooks else "any hooked timer"]
            found = "no phase seen: none of %s ran, so the whole update counted as other" % (
                missing[0])
        else:
            missing = [p for p in self.expect if p not in seen]
            if not missing:
                return None
            found = "no %s phase seen (saw %s), so that time counted as another phase" % (
                " or ".join(missing), ", ".join(sorted(seen)))
        self.blind_updates += 1
        msg = ("eerl: update %d ended with %s in %s. Timers seen that map to no phase: %s. "
               "%s Map the names this version uses with "
               "install(..., phases={name: phase})."
               % (self._updates, found, who, ", ".join(unmapped) if unmapped else "none",
                  fw._known() if fw is not None else ""))
        return msg, missing, not seen

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


def phase_table(defaults, overrides):
    """An integration's table of hook point -> eerl phase: defaults, with overrides (a name to
    None drops that point, any other value sets it)."""
    table = dict(defaults)
    for k, v in (overrides or {}).items():
        if v is None:
            table.pop(k, None)
        else:
            table[k] = v
    return table


def numeric_metrics(session):
    """session.metrics() without its one text entry, eerl/state, whose number eerl/state_code
    the loggers get instead (TensorBoard and TRL's averaging take numbers only; the codes are
    the indices of eerl._types.STATES, docs/what-eerl-did.md)."""
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
