"""The typed surface of every eerl session: eerl.Session on one node and
eerl.multinode.MultiNodeSession across many are one runtime and answer to one interface
(SessionLike), and what they return is typed, as Zeus's Measurement is: an update's figures
(Update), a clock setting (Setting), the controller's status (Status). metrics() stays the flat
"eerl/..." dict that loggers take.

Setting and Status also read by key and iterate over their field names (s.status()["state"],
dict(s.applied_setting())): code written when these calls returned dicts keeps working. An
Update reads by the metrics() keys (u["eerl/update_energy_j"]) for the same reason.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any, ContextManager, Dict, Optional, Protocol, runtime_checkable


class _Fields(Mapping):
    """A dataclass that reads by field name too (see the module's docstring)."""

    def __getitem__(self, key):
        if isinstance(key, str) and key in self._names():
            return getattr(self, key)
        raise KeyError(key)

    def __iter__(self):
        return iter(self._names())

    def __len__(self):
        return len(self._names())

    @classmethod
    def _names(cls):
        return [f.name for f in dataclasses.fields(cls)]

    def to_dict(self):
        """A plain dict (nested settings too), e.g. for json.dumps."""
        return {k: (v.to_dict() if isinstance(v, _Fields) else v) for k, v in self.items()}


@dataclasses.dataclass(frozen=True, eq=False)
class Setting(_Fields):
    """SM clocks in MHz; 0 is the default governor."""
    gen_mhz: int
    train_mhz: int
    idle_mhz: int

    @property
    def governor(self):
        """True when every clock is left to the governor."""
        return not (self.gen_mhz or self.train_mhz or self.idle_mhz)


@dataclasses.dataclass(frozen=True, eq=False)
class Status(_Fields):
    """The controller's state ("calibrating", "searching", "confirming", "locked",
    "monitoring"), its lock, the setting it requests now, and its counts."""
    state: str
    locked: bool
    locked_setting: Optional[Setting]
    requested: Setting
    observed: int
    rejected: int
    trials: int
    refreshes: int
    references: int


@dataclasses.dataclass(frozen=True)
class Update:
    """What one update_end measured and decided. meter_flags: EERL_METER_* bits of the update's
    energy reading (0: the counters alone; docs/meter.md); accepted: False when the controller
    refused the observation; next_setting: what the session applies from the next phase
    boundary; metrics: metrics() right after the update."""
    update: int
    energy_j: float
    time_s: float
    valid_tokens: float
    energy_per_valid_token_j: float
    valid_tokens_per_s: float
    accepted: bool
    meter_flags: int
    state: str
    next_setting: Setting
    metrics: Dict[str, Any]

    def __getitem__(self, key):
        return self.metrics[key]

    def get(self, key, default=None):
        return self.metrics.get(key, default)

    def __contains__(self, key):
        return key in self.metrics


@dataclasses.dataclass(frozen=True, eq=False)
class Estimate(_Fields):
    """What eerl saved on the run so far, estimated from the run alone (include/eerl/estimate.h,
    docs/what-eerl-did.md): every update after the calibration against what the default
    governor, predicted from the run's earlier governor updates, would have taken for the same
    work. The intervals (*_ci_*) are 90% intervals (low, high). judged: False while it cannot
    be judged (why says so); figures that do not exist yet are NaN."""
    updates: int
    judged_updates: int
    calibration_updates: int
    not_counted: int
    energy_j: float
    predicted_governor_energy_j: float
    saved_j: float
    saved_ci_j: tuple
    time_s: float
    predicted_governor_time_s: float
    saving_pct: float
    saving_ci_pct: tuple
    throughput_change_pct: float
    throughput_ci_pct: tuple
    judged: bool
    why: str


@dataclasses.dataclass(frozen=True, eq=False)
class RunSummary(_Fields):
    """What eerl did on the run, as Session.close() returns it (docs/what-eerl-did.md).
    energy_j: the metered energy of every update ended (kWh: energy_j / 3.6e6); updates: the
    updates of the run (from the first to the last update number, gaps included); not_judged:
    those the estimate leaves out: the first (warm-up), those the GPU slowed by itself
    (slowed), those missing from the numbering (gaps), and those the controller refused or
    the predictor could not judge; allowance_kept: the estimated throughput change within
    -allowed_loss (None: not judged); observe_only: the run was the self-check, whose saving
    should hold 0; estimate: the run's Estimate (None: the runtime could not give it); line:
    all of it in one line, as the integrations print it."""
    energy_j: float
    updates: int
    not_judged: int
    slowed: int
    gaps: int
    allowed_loss: float
    allowance_kept: Optional[bool]
    observe_only: bool
    estimate: Optional[Estimate]
    line: str


@runtime_checkable
class SessionLike(Protocol):
    """What eerl.Session and MultiNodeSession both are; the integrations take either."""

    mode: str

    def phase_begin(self, name: str, pool: Optional[str] = None) -> str: ...

    def phase_end(self, name: str, pool: Optional[str] = None) -> None: ...

    def phase(self, name: str, pool: Optional[str] = None) -> ContextManager: ...

    def update_end(self, generated_tokens: float, valid_tokens: float,
                   longest_response: float, policy_version: Optional[int] = None,
                   update: Optional[int] = None) -> Update: ...

    def sample(self) -> None: ...

    def metrics(self) -> Dict[str, Any]: ...

    def status(self) -> Status: ...

    def applied_setting(self) -> Setting: ...

    def save_state(self, path) -> str: ...

    @property
    def resumed(self) -> bool: ...

    @property
    def resume_detail(self) -> str: ...

    @property
    def prior_taken(self) -> bool: ...

    @property
    def prior_detail(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    def close(self) -> Optional[RunSummary]: ...
