"""What eerl did on a run, in figures and in one line (docs/what-eerl-did.md): the run's
estimate (include/eerl/estimate.h) as eerl.api.Estimate and as "eerl/..." metrics, and the
end-of-run summary Session.close() returns and the integrations print. Also the words eerl
report puts in its titles. Needs no libeerl: it formats what session.py and tracefile.py read.
"""

import math
import re

from . import api

# eerl_meter flags of an update the GPU slowed by itself (include/eerl/meter.h:
# EERL_METER_SLOWED | EERL_METER_LIMIT): such an update is not shown to the controller.
METER_SELF_SLOWED = 0x80 | 0x100


def estimate_of(c):
    """api.Estimate of a ctypes eerl_estimate (_types.Estimate)."""
    return api.Estimate(
        updates=int(c.updates), judged_updates=int(c.judged_updates),
        calibration_updates=int(c.calibration_updates), not_counted=int(c.not_counted),
        energy_j=c.energy_j, predicted_governor_energy_j=c.predicted_governor_energy_j,
        saved_j=c.saved_j, saved_ci_j=tuple(c.saved_ci_j), time_s=c.time_s,
        predicted_governor_time_s=c.predicted_governor_time_s, saving_pct=c.saving_pct,
        saving_ci_pct=tuple(c.saving_ci_pct), throughput_change_pct=c.throughput_change_pct,
        throughput_ci_pct=tuple(c.throughput_ci_pct), judged=bool(c.judged),
        why=c.why.decode(errors="replace"))


def _finite(v):
    return isinstance(v, (int, float)) and math.isfinite(v)


def estimate_metrics(e):
    """The "eerl/..." metrics of an api.Estimate: eerl/estimate_judged (1 or 0) and the
    updates counted always; each figure only where it is a number (never NaN)."""
    m = {"eerl/estimate_judged": int(e.judged), "eerl/estimate_updates": e.updates,
         "eerl/estimate_judged_updates": e.judged_updates}
    for key, v, ci in (("saving_pct", e.saving_pct, e.saving_ci_pct),
                       ("throughput_change_pct", e.throughput_change_pct, e.throughput_ci_pct),
                       ("saved_j", e.saved_j, e.saved_ci_j)):
        if _finite(v):
            m["eerl/" + key] = v
        base = key[:-4] if key.endswith("_pct") else key[:-2]
        unit = "_pct" if key.endswith("_pct") else "_j"
        for side, x in zip(("lo", "hi"), ci):
            if _finite(x):
                m["eerl/%s_%s%s" % (base, side, unit)] = x
    return m


def energy_text(j):
    """J in the unit a person reads: J, kJ, Wh or kWh."""
    if not _finite(j):
        return "unknown energy"
    if abs(j) >= 3.6e6:
        return "%.1f kWh" % (j / 3.6e6)
    if abs(j) >= 3.6e3:
        return "%.1f Wh" % (j / 3.6e3)
    return "%.0f J" % j


def _r(x):
    """x rounded to the 0.1 printed, without the sign of a negative zero."""
    return round(x, 1) + 0.0


def _ci(ci, signed=False):
    f = "%+.1f" if signed else "%.1f"
    if not all(_finite(x) for x in ci):
        return "[no interval]"
    return "[%s, %s]" % (f % _r(ci[0]), f % _r(ci[1]))


def holds_zero(e):
    """Whether the saving's interval holds 0 (the observe-only self-check passes)."""
    lo, hi = e["saving_ci_pct"]
    return _finite(lo) and _finite(hi) and lo <= 0 <= hi


def estimate_text(e, observe_only=False):
    """The estimate in words, from an api.Estimate or a trace's closing estimate line:
    "estimated saving 8.4% [7.7, 9.0] (90%), throughput -1.4% [-2.4, -0.4]"; for an
    observe-only run, whether the saving holds 0 as it should; "not judged: why" when it
    cannot be judged."""
    s, t = e["saving_pct"], e["throughput_change_pct"]
    if not e["judged"] or not _finite(s):
        return "estimated saving not judged: %s" % (e.get("why") or "no figure yet")
    out = "estimated saving %.1f%% %s (90%%)" % (_r(s), _ci(e["saving_ci_pct"]))
    if observe_only:
        out += (", holds 0 as it should" if holds_zero(e) else
                ", should hold 0 and does not: the estimate is off on this job")
    if _finite(t):
        out += ", throughput %+.1f%% %s" % (_r(t), _ci(e["throughput_ci_pct"], signed=True))
    return out


def _left_out(n, warm, slowed, gaps):
    parts = [("%d warm-up" % warm) if warm else "",
             ("%d slowed by the GPU" % slowed) if slowed else "",
             ("%d missing" % gaps) if gaps else ""]
    rest = n - warm - slowed - gaps
    if rest > 0:
        parts.append("%d refused or not predicted" % rest)
    parts = [p for p in parts if p]
    return " (%s)" % ", ".join(parts) if parts else ""


def run_summary(energy_j, ended, gaps, slowed, warm, allowed_loss, observe_only, estimate):
    """api.RunSummary of a run: energy_j metered over its ended updates, ended of them and
    gaps missing from their numbering, slowed of them slowed by the GPU, warm of them before
    the first counted update; allowed_loss: the run's allowance (None: not known, and not
    judged); estimate: its api.Estimate, or None."""
    updates = ended + gaps
    head = "eerl: observe-only self-check: " if observe_only else "eerl: "
    if updates == 0:
        return api.RunSummary(energy_j, 0, 0, 0, 0, allowed_loss, None, observe_only, estimate,
                              head + "no update ended: nothing measured")
    parts = ["%s used over %d updates" % (energy_text(energy_j), updates)]
    kept = None
    not_judged = updates if estimate is None else max(0, updates - estimate.updates)
    if estimate is None:
        parts.append("no estimate")
    else:
        parts.append(estimate_text(estimate, observe_only))
        if estimate.judged and _finite(estimate.throughput_change_pct) and not observe_only \
                and allowed_loss is not None:
            kept = estimate.throughput_change_pct >= -100.0 * allowed_loss
            parts.append("allowance %g%% %s" % (100.0 * allowed_loss, "kept" if kept else
                                                "exceeded"))
    parts.append("%d of %d updates not judged%s"
                 % (not_judged, updates, _left_out(not_judged, warm, slowed, gaps)))
    return api.RunSummary(energy_j, updates, not_judged, slowed, gaps, allowed_loss, kept,
                          observe_only, estimate, head + "; ".join(parts))


def _trace_estimate(d):
    """api.Estimate of a trace's closing estimate line (null: NaN)."""
    def num(k):
        v = d.get(k)
        return math.nan if v is None else float(v)

    def pair(k):
        v = d.get(k) or (None, None)
        return tuple(math.nan if x is None else float(x) for x in v)

    return api.Estimate(
        int(d.get("updates", 0)), int(d.get("judged_updates", 0)),
        int(d.get("calibration_updates", 0)), int(d.get("not_counted", 0)), num("energy_j"),
        num("predicted_governor_energy_j"), num("saved_j"), pair("saved_ci_j"), num("time_s"),
        num("predicted_governor_time_s"), num("saving_pct"), pair("saving_ci_pct"),
        num("throughput_change_pct"), pair("throughput_ci_pct"), bool(d.get("judged")),
        d.get("why") or "")


def from_trace(t):
    """The api.RunSummary of a trace (eerl.tracefile.Trace) as its session's close() made it:
    the same line from the trace's update lines and its closing estimate line."""
    from . import tracefile
    energy, ended, gaps, slowed, warm, last = 0.0, 0, 0, 0, 0, None
    for u in t.updates:
        n = int(u["update"])
        energy += tracefile.number(u["energy_j"])
        ended += 1
        if last is not None and n > last + 1:
            gaps += n - last - 1
        last = n
        flags = (u.get("runtime") or {}).get("meter_flags") or ""
        flags = set(re.split(r"[^a-z_]+", flags) if isinstance(flags, str) else flags)
        if flags & {"slowed", "power_limit"}:
            slowed += 1
        elif n < 2:
            warm += 1
    run = t.run or {}
    allowed = run.get("allowed_loss", (t.header.get("config") or {}).get("allowed_loss"))
    observe = run.get("observe_only") is True or run.get("role") == "governor"
    est = _trace_estimate(t.estimate) if t.estimate is not None else None
    allowed = float(allowed) if allowed is not None else None  # None: the trace does not say
    return run_summary(energy, ended, gaps, slowed, warm, allowed, observe, est)
