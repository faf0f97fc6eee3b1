"""Pictures of runs from their traces, with matplotlib: the one implementation of the report
(`eerl report` hands its arguments here).

    eerl report TRACE.jsonl... [-o FILE.png|FILE.svg]      (or python -m eerl.report ...)

With a controller trace:
  1. the generation and training clocks per update of the first controller run, calibration
     shaded, trial starts, verdicts, confirmations, the lock, adjustments and refreshes marked;
  2. throughput, power and energy-per-token change against the governor run of the same seed,
     per update (5-update moving average) and over the whole run from update 2, with the
     allowance as a line;
  3. power per phase under the governor and the controller (the paper's Figure 1);
  4. throughput, power and energy-per-token change per setting the controller ran (Figure 2);
  5. energy per valid training token over updates for every run.
Without the governor run of its seed, panels 1, 3 and 5 (2 and 4 need it). With governor
(observe-only) traces alone: power and energy per phase per update of the first, and energy per
valid training token of every run. Every axis names its unit.

A trace is a governor run when its "run" line says role "governor" or observe_only true; runs
are paired by the run line's seed. From a notebook: eerl.report.figure(paths) returns the
matplotlib Figure. Reads the trace files only (docs/trace-format.md); needs no libeerl.
"""

import argparse
import math
import os
import tempfile
import sys

from . import summary, tracefile

FIRST_UPDATE = 2  # like eerl analyze/report: update 0 and 1 warm up


class Run:
    def __init__(self, path):
        self.path = path
        self.role = "controller"
        self.seed = None
        self.mode = None
        self.peak = 0
        self.allowed_loss = 0.0
        self.update, self.N, self.T, self.E = [], [], [], []
        self.gen, self.train, self.idle, self.state, self.marks = [], [], [], [], []
        self.phases = []  # per update: {phase: (time_s, energy_j)}
        self.observe_only = False
        self.estimate = None  # the trace's closing estimate line
        self.locks = []  # (update, gen_mhz, train_mhz) of each lock event


def load(path):
    """Reads one trace (eerl.tracefile) into a Run; ValueError naming the file and line when it
    is not one. A last line cut short (no newline, not JSON) is left out with a RuntimeWarning
    naming it."""
    t = tracefile.read(path)
    r = Run(path)
    h = t.header
    r.mode, r.peak = h.get("mode"), int(h.get("governor_peak_mhz", 0))
    # a header without the key: the allowance is not known and not drawn
    r.allowed_loss = float((h.get("config") or {}).get("allowed_loss", 0.0))
    run = t.run or {}
    if isinstance(run.get("role"), str):
        r.role = run["role"]
    elif run.get("observe_only") is True:
        r.role = "governor"
    if isinstance(run.get("seed"), int):
        r.seed = run["seed"]
    r.observe_only = run.get("observe_only") is True
    r.estimate = t.estimate
    for o in t.updates:
        try:
            r.update.append(int(o["update"]))
            r.N.append(tracefile.number(o["work"]["N"]))
            r.T.append(tracefile.number(o["time_s"]))
            r.E.append(tracefile.number(o["energy_j"]))
            obs = o["setting"]["observed"]
            r.gen.append(tracefile.clock_mhz(obs.get("gen_mhz")))
            r.train.append(tracefile.clock_mhz(obs.get("train_mhz")))
            r.idle.append(tracefile.clock_mhz(obs.get("idle_mhz")))
            r.phases.append({k: (tracefile.number(v.get("time_s", 0)),
                                 tracefile.number(v.get("energy_j", 0)))
                             for k, v in (o.get("phases") or {}).items()})
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError("%s: bad update line of update %s (%s)"
                             % (path, o.get("update"), e))
        kinds = set()
        state = None
        for ev in o.get("events", []):
            kinds.add(ev.get("kind"))
            state = ev.get("state", state)
            if ev.get("kind") == "lock":
                nxt = ev.get("next") or {}
                r.locks.append((r.update[-1], tracefile.clock_mhz(nxt.get("gen_mhz")),
                                tracefile.clock_mhz(nxt.get("train_mhz"))))
        r.marks.append(kinds)
        r.state.append(state)
    return r


def what_happened(r):
    """What the controller did on run r, in a few words, from its trace's events: "observe-only:
    the governor kept every clock", "calibration only (N updates)", "locked at 1800/1260 after
    update 52", "searching at the end (no lock by update N)"."""
    if r.observe_only or r.role == "governor":
        return "observe-only: the governor kept every clock"
    if not any("calibrated" in k for k in r.marks):
        return "calibration only (%d updates)" % len(r.update)
    if r.locks:
        u, g, t = r.locks[-1]
        said = "locked at %s after update %d" % (_setting_name(g, t, 0), u)
        if len(r.locks) > 1:
            said += " (lock %d of the run)" % len(r.locks)
        adjust = sum(1 for x, k in zip(r.update, r.marks) if x > u and "adjust" in k)
        return said + (", %d adjustment%s since" % (adjust, "s" * (adjust > 1)) if adjust
                       else "")
    last = next((st for st in reversed(r.state) if st), "searching")
    return "%s at the end (no lock by update %d)" % (last, r.update[-1])


def totals(r):
    """The run's estimate and totals in one line, for a title: what eerl saved (the trace's
    closing estimate line) and the energy of its updates."""
    used = "%s used over %d updates" % (summary.energy_text(sum(r.E)), len(r.update))
    if r.estimate is None:
        return "%s; no estimate in the trace (eerl analyze %s computes it)" % (
            used, os.path.basename(r.path))
    e = dict(r.estimate)
    for k in ("saving_pct", "throughput_change_pct"):
        e[k] = math.nan if e.get(k) is None else e[k]
    for k in ("saving_ci_pct", "throughput_ci_pct"):
        e[k] = [math.nan if x is None else x for x in (e.get(k) or (None, None))]
    said = summary.estimate_text(e, observe_only=r.observe_only or r.role == "governor")
    return "%s; %s" % (used, said)


def _pair(runs):
    """The first controller run and the governor run of its seed (either may be None)."""
    ctl = next((r for r in runs if r.role != "governor"), None)
    gov = next((r for r in runs if r.role == "governor" and
                (ctl is None or ctl.seed is None or r.seed is None or r.seed == ctl.seed)), None)
    return ctl, gov


PHASES = (("generation", "#1f77b4"), ("logprob", "#9467bd"), ("training", "#d62728"))
# Phases whose lines lie on each other (a colocated run's phases draw the same power) stay
# apart by their markers: a line hidden under another is still seen.
MARKERS = {"generation": "o", "logprob": "s", "training": "^"}
PHASE_NAMES = ("generation", "log-prob", "training")  # as the legends of `eerl report` say


def phase_power(r, phase):
    """Per update: the phase's power (W, whole allocation), NaN where it did not run."""
    out = []
    for ph in r.phases:
        t, e = ph.get(phase, (0.0, 0.0))
        out.append(e / t if t > 0 else math.nan)
    return out


def _setting_name(g, t, i):
    name = "%s/%s" % (g or "Gov", t or "Gov")
    return name + (" idle %d" % i if i else "")


def per_setting(ctl, gov):
    """[(setting, throughput %, power %, energy per token %, updates)] per setting the controller
    ran (from FIRST_UPDATE, in order of first use), against the governor run's same updates."""
    at = {u: i for i, u in enumerate(gov.update)}
    sums, order = {}, []
    for i, u in enumerate(ctl.update):
        g = at.get(u)
        if g is None or u < FIRST_UPDATE:
            continue
        key = (ctl.gen[i], ctl.train[i], ctl.idle[i])
        if key not in sums:
            sums[key] = [0.0] * 6 + [0]
            order.append(key)
        x = sums[key]
        for k, v in enumerate((ctl.N[i], ctl.T[i], ctl.E[i], gov.N[g], gov.T[g], gov.E[g])):
            x[k] += v
        x[6] += 1
    out = []
    for key in order:
        x = sums[key]
        out.append((_setting_name(*key), 100 * ((x[0] / x[1]) / (x[3] / x[4]) - 1),
                    100 * ((x[2] / x[1]) / (x[5] / x[4]) - 1),
                    100 * ((x[2] / x[0]) / (x[5] / x[3]) - 1), x[6]))
    return out


def changes(ctl, gov):
    """Per-update 5-update moving means of throughput, power and energy-per-token change (%)
    against gov, and the whole-run changes from FIRST_UPDATE (None when nothing matches)."""
    at = {u: i for i, u in enumerate(gov.update)}
    xs, tp, pw, ep = [], [], [], []
    sn, st, se = [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]
    for i, u in enumerate(ctl.update):
        g = at.get(u)
        if g is not None and u >= FIRST_UPDATE:
            sn[0] += gov.N[g]
            st[0] += gov.T[g]
            se[0] += gov.E[g]
            sn[1] += ctl.N[i]
            st[1] += ctl.T[i]
            se[1] += ctl.E[i]
        a = b = c = 0.0
        k = 0
        for j in range(max(0, i - 4), i + 1):
            h = at.get(ctl.update[j])
            if h is None:
                continue
            a += (ctl.N[j] / ctl.T[j]) / (gov.N[h] / gov.T[h])
            b += (ctl.E[j] / ctl.T[j]) / (gov.E[h] / gov.T[h])
            c += (ctl.E[j] / ctl.N[j]) / (gov.E[h] / gov.N[h])
            k += 1
        if k:
            xs.append(u)
            tp.append(100 * (a / k - 1))
            pw.append(100 * (b / k - 1))
            ep.append(100 * (c / k - 1))
    whole = None
    if min(st + sn) > 0:
        whole = (100 * ((sn[1] / st[1]) / (sn[0] / st[0]) - 1),
                 100 * ((se[1] / st[1]) / (se[0] / st[0]) - 1),
                 100 * ((se[1] / sn[1]) / (se[0] / sn[0]) - 1))
    return xs, tp, pw, ep, whole


def _matplotlib():
    try:
        import matplotlib
    except ImportError:
        raise ValueError("matplotlib is not installed: pip install matplotlib (or apt-get install "
                         "python3-matplotlib), or pip install 'eerl[report]'")
    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


WATT = ("W", "kW", "MW", "GW")
JOULE = ("J", "kJ", "MJ", "GJ")


def unit(vmax, units):
    """(divisor, unit) for values up to vmax: the base unit times 1000 until vmax is below 1000,
    so a tick label has at most three digits before its point (the same rule as `eerl report`)."""
    div, k = 1.0, 0
    while k < len(units) - 1 and vmax >= 1000 * div:
        div *= 1000
        k += 1
    return div, units[k]


def _finite_max(values):
    return max([v for v in values if math.isfinite(v)] or [0.0])


def _phase_units(runs):
    """The units of the power panel (generation, log-prob, training: refit's power is not drawn)
    and of the energy panel (every phase), from the largest value drawn."""
    pmax = _finite_max([p for r in runs for ph, _ in PHASES for p in phase_power(r, ph)])
    emax = _finite_max([e for r in runs for ph in r.phases for _, e in ph.values()])
    return unit(pmax, WATT), unit(emax, JOULE)


def _phase_lines(a, r, key, div, **style):
    """One line per phase of run r: its power (key "power") or energy, divided by div; each
    phase marked (MARKERS) about 25 times along the run."""
    every = max(1, len(r.update) // 25)
    for (phase, col), name in zip(PHASES, PHASE_NAMES):
        ys = (phase_power(r, phase) if key == "power" else
              [ph.get(phase, (0, math.nan))[1] for ph in r.phases])
        a.plot(r.update, [y / div for y in ys], color=col, label=name, marker=MARKERS[phase],
               markevery=every, markersize=4, fillstyle="none", **style)


def _from_zero(a):
    """A magnitude's axis starts at zero, so a small wobble looks small, and ends a tenth above
    the largest value drawn."""
    top = _finite_max([float(y) for ln in a.get_lines() for y in ln.get_ydata()])
    a.set_ylim(0, top * 1.1 if top > 0 else 1.0)


def _panel_clocks(a, ctl, peak, alone=False):
    """Panel 1: clocks and marks of the controller run."""
    gen = [m or peak for m in ctl.gen]
    train = [m or peak for m in ctl.train]
    used = [m for m in ctl.gen + ctl.train if m] or [peak]
    lo = (min(used) - 200) // 100 * 100 if min(used) > 300 else 0
    calib = [u for u, s, k in zip(ctl.update, ctl.state, ctl.marks)
             if s == "calibrating" or "calibrated" in k]
    if calib:
        a.bar(calib, [peak + 120 - lo] * len(calib), width=1.0, bottom=lo, color="#cccccc",
              alpha=0.35, label="calibration", align="center")
    # Training under generation, generation dashed: at the same clock both stay visible.
    a.step(ctl.update, train, where="post", lw=3, color="#d62728", label="training")
    a.step(ctl.update, gen, where="post", lw=2, ls=(0, (5, 3)), color="#1f77b4",
           label="generation")
    marks = [("propose", peak + 60, "D", "#2ca02c", "trial starts"),
             (("trial", "round"), peak + 60, "^", "#9467bd", "verdict"),
             ("confirm", peak + 90, "s", "#ff7f0e", "confirmation"),
             ("adjust", peak + 90, "o", "#8c564b", "adjust"),
             ("refresh", peak + 90, "o", "#17becf", "refresh")]
    for kinds, y, mk, col, label in marks:
        kinds = (kinds,) if isinstance(kinds, str) else kinds
        us = [u for u, k in zip(ctl.update, ctl.marks) if k & set(kinds)]
        if us:
            a.scatter(us, [y] * len(us), marker=mk, color=col, label=label,
                      facecolors="none" if mk in "o" and label == "refresh" else col)
    locks = [u for u, k in zip(ctl.update, ctl.marks) if "lock" in k]
    if locks:
        a.vlines(locks, lo, peak + 90, colors="#000000", lw=3, label="lock")
    a.set_title("%s%s: %s\nSM clocks per update (governor drawn at its %d MHz peak)"
                % ("%s\n" % totals(ctl) if alone else "", os.path.basename(ctl.path),
                   what_happened(ctl), peak))
    a.set_ylabel("SM clock (MHz)")
    a.set_ylim(lo, peak + 120)


def _panel_change(a, ctl, gov):
    """Panel 2: changes against the governor run of the same seed, with the allowance."""
    allow = -100 * ctl.allowed_loss
    xs, tp, pw, ep, whole = changes(ctl, gov)
    a.plot(xs, tp, lw=2, color="#1f77b4", label="throughput")
    a.plot(xs, pw, lw=2, color="#ff7f0e", label="power")
    a.plot(xs, ep, lw=2, color="#2ca02c", label="energy per token")
    a.axhline(0, color="#888888", lw=1)
    if allow < 0:
        a.axhline(allow, color="#1f77b4", lw=2, ls="--", label="allowance (%g%%)" % allow)
    w = ("throughput %+.2f%%, power %+.2f%%, energy/token %+.2f%%" % whole
         if whole else "no matched updates")
    a.set_title("change vs governor run %s (5-update mean)\nwhole run from update %d: %s"
                % (os.path.basename(gov.path), FIRST_UPDATE, w))
    a.set_ylabel("change (%)")


def _panel_phase_power(a, ctl, gov, pu):
    """Panel 3 (Figure 1): power per phase, the controller run solid, its governor run dashed."""
    _phase_lines(a, ctl, "power", pu[0], lw=2)
    if gov is not None:
        for (phase, col) in PHASES:
            a.plot(gov.update, [p / pu[0] for p in phase_power(gov, phase)], lw=1, ls="--",
                   color=col)
    a.set_title("power per phase (whole allocation)%s"
                % (": governor run dashed, controller run solid" if gov is not None
                   else ", controller run"))
    a.set_ylabel("power (%s)" % pu[1])
    _from_zero(a)


def _panel_settings(a, ctl, gov):
    """Panel 4 (Figure 2): the change per setting the controller ran."""
    allow = -100 * ctl.allowed_loss
    rows = per_setting(ctl, gov)
    if rows:
        xs = range(len(rows))
        for k, (label, col) in enumerate((("throughput", "#1f77b4"), ("power", "#ff7f0e"),
                                          ("energy per token", "#2ca02c"))):
            a.bar([x + (k - 1) * 0.27 for x in xs], [r[1 + k] for r in rows], width=0.27,
                  color=col, label=label)
        if allow < 0:
            a.axhline(allow, color="#1f77b4", lw=2, ls="--", label="allowance (%g%%)" % allow)
        a.axhline(0, color="#888888", lw=1)
        a.set_xticks(list(xs))
        a.set_xticklabels([r[0] for r in rows], rotation=30, ha="right", fontsize=8)
        a.set_title("change vs the governor run per setting the controller ran (updates from %d)"
                    % FIRST_UPDATE)
        a.set_xlabel("setting: generation/training SM clock (MHz)")
    else:
        a.set_title("no update of the governor run matches one of the controller run: no change "
                    "per setting")
    a.set_ylabel("change (%)")
    a.grid(color="#dddddd")
    if a.get_legend_handles_labels()[0]:
        a.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)


def _panels_observe_only(ax, gov, pu, eu):
    """Observe-only: what the governor did, phase by phase (refit's power is left out: a refit
    lasts milliseconds, and its energy over its time is mostly noise)."""
    _phase_lines(ax[0], gov, "power", pu[0], lw=2)
    ax[0].set_title("%s (governor, observe-only self-check)\n%s\npower per phase, whole "
                    "allocation" % (os.path.basename(gov.path), totals(gov)))
    ax[0].set_ylabel("power (%s)" % pu[1])
    _from_zero(ax[0])
    _phase_lines(ax[1], gov, "energy", eu[0], lw=2)
    ax[1].plot(gov.update, [ph.get("refit", (0, math.nan))[1] / eu[0] for ph in gov.phases],
               lw=1, color="#7f7f7f", label="refit")
    ax[1].set_title("energy per phase per update (SM clocks: the governor chose them)")
    ax[1].set_ylabel("energy (%s)" % eu[1])
    _from_zero(ax[1])


def _panel_ept(a, runs):
    """Last panel: energy per valid token of every run."""
    for r in runs:
        g = r.role == "governor"
        a.plot(r.update, [e / n if n > 0 else math.nan for e, n in zip(r.E, r.N)],
               lw=1 if g else 2, ls="--" if g else "-",
               label=run_name(r))
    a.set_title("energy per valid training token")
    a.set_ylabel("energy (J / token)")
    _from_zero(a)


def run_name(r):
    """A run as the legends name it: its role and seed, or its file where it has no seed."""
    role = "governor" if r.role == "governor" else "controller"
    if r.seed is None:
        return "%s (%s)" % (role, os.path.basename(r.path))
    return "%s seed %d" % (role, r.seed)


def figure(paths):
    """The report's matplotlib Figure for the traces at paths: with a controller trace and the
    governor run of its seed, the clocks, the change against the governor with the allowance,
    power per phase under both (the paper's Figure 1), the change per setting (Figure 2) and the
    energy per valid token; a controller trace without its governor run, the three of these that
    need none (clocks, power per phase, energy per token); governor (observe-only) traces alone,
    power and energy per phase per update and the energy per valid token. Every axis names its
    unit; power and energy per phase take the unit that keeps tick labels short (unit())."""
    if not paths:
        raise ValueError("no traces given")
    plt = _matplotlib()
    runs = [load(p) for p in paths]
    for r in runs:
        if not r.update:
            raise ValueError("%s has no update lines" % r.path)
    ctl, gov = _pair(runs)
    first = ctl or gov
    peak = first.peak or max([m for m in first.gen + first.train if m] or [1980])
    five = ctl is not None and gov is not None
    fig, ax = plt.subplots(5 if five else 3, 1, figsize=(11, 19 if five else 11.5))
    pu, eu = _phase_units([r for r in (gov, ctl) if r is not None])
    if ctl is None:
        _panels_observe_only(ax, gov, pu, eu)
        upd_axes = list(ax)
    elif gov is None:
        _panel_clocks(ax[0], ctl, peak, alone=True)
        _panel_phase_power(ax[1], ctl, None, pu)
        upd_axes = list(ax)
    else:
        _panel_clocks(ax[0], ctl, peak)
        _panel_change(ax[1], ctl, gov)
        _panel_phase_power(ax[2], ctl, gov, pu)
        _panel_settings(ax[3], ctl, gov)
        upd_axes = [ax[0], ax[1], ax[2], ax[4]]
    _panel_ept(ax[-1], runs)
    for a in upd_axes:
        a.set_xlabel("update")
        a.set_xlim(0, first.update[-1] + 1)
        a.grid(color="#dddddd")
        if a.get_legend_handles_labels()[0]:
            a.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    fig.tight_layout()
    return fig


def describe(paths):
    """What a picture of these traces shows, in words: "controller run A against governor run B",
    "controller run A" or "observe-only: governor run B"."""
    ctl, gov = _pair([load(p) for p in paths])
    name = os.path.basename
    if ctl is None:
        return "observe-only: governor run %s" % name(gov.path)
    if gov is None:
        return "controller run %s" % name(ctl.path)
    return "controller run %s against governor run %s" % (name(ctl.path), name(gov.path))


def save(fig, out, ext):
    """Writes the figure to out through a temporary file created fresh beside it (never through
    a link, never over another file), renamed over out only once it is whole."""
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(out), suffix=ext,
                               dir=os.path.dirname(os.path.abspath(out)))
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format=ext[1:], dpi=100)
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv=None, prog="python -m eerl.report"):
    ap = argparse.ArgumentParser(prog=prog, description="Draws the eerl report (clocks, changes "
                                 "against the governor, power per phase, energy per token) "
                                 "from runtime traces. Example: eerl sim --trace runs && "
                                 "eerl report runs/*.jsonl -o runs.png")
    ap.add_argument("traces", nargs="+", metavar="TRACE.jsonl")
    ap.add_argument("-o", "--output", help="FILE.png or FILE.svg (default: the first trace's "
                    "name with .png)")
    args = ap.parse_args(argv)
    out = args.output or os.path.splitext(args.traces[0])[0] + ".png"
    ext = os.path.splitext(out)[1].lower()
    if ext not in (".png", ".svg"):
        ap.error("output '%s' must end in .png or .svg (the picture's format)" % out)
    try:
        fig = figure(args.traces)
        what = describe(args.traces)
        save(fig, out, ext)
    except ValueError as e:
        print("%s: %s" % (prog, e), file=sys.stderr)
        return 1
    except OSError as e:
        print("%s: cannot write '%s': %s" % (prog, out, e.strerror), file=sys.stderr)
        return 1
    print("%s: wrote %s (%s)" % (prog, out, what), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
