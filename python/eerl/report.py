"""Pictures of runs from their traces, with matplotlib: the same panels as `eerl report`.

    python -m eerl.report TRACE.jsonl... [-o FILE.png|FILE.svg]

With a controller trace:
  1. the generation and training clocks per update of the first controller run, calibration
     shaded, trial starts, verdicts, confirmations, the lock, adjustments and refreshes marked;
  2. throughput, power and energy-per-token change against the governor run of the same seed,
     per update (5-update moving average) and over the whole run from update 2, with the
     allowance as a line;
  3. power per phase under the governor and the controller (the paper's Figure 1);
  4. throughput, power and energy-per-token change per setting the controller ran (Figure 2);
  5. energy per valid training token over updates for every run.
With governor (observe-only) traces alone: power and energy per phase per update of the first,
and energy per valid training token of every run.

A trace is a governor run when its "run" line says role "governor" or observe_only true; runs
are paired by the run line's seed. From a notebook: eerl.report.figure(paths) returns the
matplotlib Figure. Reads the trace files only (docs/trace-format.md); needs no libeerl.
"""

import argparse
import json
import math
import os
import sys

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


def _f(v):
    if isinstance(v, str):
        return float(v)  # "nan", "inf", "-inf"
    return float(v)


def _mhz(v):
    return 0 if v in (None, "governor") else int(v)


def load(path):
    """Reads one trace into a Run; ValueError naming the file and line when it is not one."""
    r = Run(path)
    have_header = False
    if os.path.isdir(path):
        raise ValueError("'%s' is a directory; give the traces in it (e.g. '%s'/*.jsonl)"
                         % (path, path))
    try:
        f = open(path)
    except OSError as e:
        raise ValueError("cannot read %s: %s" % (path, e.strerror))
    with f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                o = json.loads(line)
                t = o["type"]
            except (ValueError, KeyError, TypeError):
                raise ValueError("%s:%d: not a trace line" % (path, lineno))
            if t == "header":
                if o.get("format") != "eerl-trace":
                    raise ValueError("%s:%d: not an eerl trace header" % (path, lineno))
                r.mode, r.peak = o.get("mode"), int(o.get("governor_peak_mhz", 0))
                r.allowed_loss = float((o.get("config") or {}).get("allowed_loss", 0.02))
                have_header = True
            elif t == "run":
                if isinstance(o.get("role"), str):
                    r.role = o["role"]
                elif o.get("observe_only") is True:
                    r.role = "governor"
                if isinstance(o.get("seed"), int):
                    r.seed = o["seed"]
            elif t == "update":
                if not have_header:
                    raise ValueError("%s:%d: update line before the header" % (path, lineno))
                try:
                    r.update.append(int(o["update"]))
                    r.N.append(_f(o["work"]["N"]))
                    r.T.append(_f(o["time_s"]))
                    r.E.append(_f(o["energy_j"]))
                    obs = o["setting"]["observed"]
                    r.gen.append(_mhz(obs.get("gen_mhz")))
                    r.train.append(_mhz(obs.get("train_mhz")))
                    r.idle.append(_mhz(obs.get("idle_mhz")))
                    r.phases.append({k: (_f(v.get("time_s", 0)), _f(v.get("energy_j", 0)))
                                     for k, v in (o.get("phases") or {}).items()})
                except (KeyError, TypeError, ValueError) as e:
                    raise ValueError("%s:%d: bad update line (%s)" % (path, lineno, e))
                kinds = set()
                state = None
                for ev in o.get("events", []):
                    kinds.add(ev.get("kind"))
                    state = ev.get("state", state)
                r.marks.append(kinds)
                r.state.append(state)
    if not have_header:
        raise ValueError("%s: no trace header (is this an eerl trace?)" % path)
    return r


def _pair(runs):
    """The first controller run and the governor run of its seed (either may be None)."""
    ctl = next((r for r in runs if r.role != "governor"), None)
    gov = next((r for r in runs if r.role == "governor" and
                (ctl is None or ctl.seed is None or r.seed is None or r.seed == ctl.seed)), None)
    return ctl, gov


PHASES = (("generation", "#1f77b4"), ("logprob", "#9467bd"), ("training", "#d62728"))


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
                         "python3-matplotlib); `eerl report` draws the same with gnuplot")
    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def figure(paths):
    """The report's matplotlib Figure for the traces at paths: with a controller trace, the
    clocks, the change against the governor with the allowance, power per phase under both
    (the paper's Figure 1), the change per setting (Figure 2) and the energy per valid token;
    with governor (observe-only) traces alone, power and energy per phase per update and the
    energy per valid token."""
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
    fig, ax = plt.subplots(5 if ctl else 3, 1, figsize=(11, 19 if ctl else 11.5))
    xmax = first.update[-1] + 1
    upd_axes = []

    if ctl is None:
        # observe-only: what the governor did, phase by phase
        a = ax[0]
        for phase, col in PHASES:
            a.plot(gov.update, [p / 1000 for p in phase_power(gov, phase)], lw=2, color=col,
                   label=phase)
        a.set_title("%s (governor, observe-only): power per phase, whole allocation"
                    % os.path.basename(gov.path))
        a.set_ylabel("kW")
        a = ax[1]
        for phase, col in PHASES + (("refit", "#7f7f7f"),):
            a.plot(gov.update, [ph.get(phase, (0, math.nan))[1] / 1000 for ph in gov.phases],
                   lw=2 if phase != "refit" else 1, color=col, label=phase)
        a.set_title("energy per phase per update (SM clocks: the governor chose them)")
        a.set_ylabel("kJ")
        upd_axes = [ax[0], ax[1], ax[2]]
    else:
        # 1: clocks and marks of the controller run
        a = ax[0]
        gen = [m or peak for m in ctl.gen]
        train = [m or peak for m in ctl.train]
        used = [m for m in ctl.gen + ctl.train if m] or [peak]
        lo = (min(used) - 200) // 100 * 100 if min(used) > 300 else 0
        calib = [u for u, s, k in zip(ctl.update, ctl.state, ctl.marks)
                 if s == "calibrating" or "calibrated" in k]
        if calib:
            a.bar(calib, [peak + 120 - lo] * len(calib), width=1.0, bottom=lo, color="#cccccc",
                  alpha=0.35, label="calibration", align="center")
        a.step(ctl.update, gen, where="post", lw=2, color="#1f77b4", label="generation")
        a.step(ctl.update, train, where="post", lw=2, color="#d62728", label="training")
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
        a.set_title("%s: SM clocks per update (governor drawn at its %d MHz peak)"
                    % (os.path.basename(ctl.path), peak))
        a.set_ylabel("MHz")
        a.set_ylim(lo, peak + 120)

        # 2: changes against the governor of the same seed, with the allowance
        a = ax[1]
        allow = -100 * ctl.allowed_loss
        if gov is not None:
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
        else:
            a.axhline(0, color="#888888", lw=1)
            a.set_title("no governor trace of the same seed: no comparison")
        a.set_ylabel("%")

        # 3 (Figure 1): power per phase, governor dashed, controller solid
        a = ax[2]
        for phase, col in PHASES:
            a.plot(ctl.update, [p / 1000 for p in phase_power(ctl, phase)], lw=2, color=col,
                   label=phase)
            if gov is not None:
                a.plot(gov.update, [p / 1000 for p in phase_power(gov, phase)], lw=1, ls="--",
                       color=col)
        a.set_title("power per phase (whole allocation): governor run dashed, controller run "
                    "solid")
        a.set_ylabel("kW")

        # 4 (Figure 2): per setting
        a = ax[3]
        rows = per_setting(ctl, gov) if gov is not None else []
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
            a.set_title("change vs the governor run per setting the controller ran (gen/train MHz; "
                        "updates from %d)" % FIRST_UPDATE)
        else:
            a.set_title("no governor trace of the same seed: no change per setting")
        a.set_ylabel("%")
        a.grid(color="#dddddd")
        if a.get_legend_handles_labels()[0]:
            a.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
        upd_axes = [ax[0], ax[1], ax[2], ax[4]]

    # last: energy per valid token of every run
    a = ax[-1]
    for r in runs:
        g = r.role == "governor"
        a.plot(r.update, [e / n if n > 0 else math.nan for e, n in zip(r.E, r.N)],
               lw=1 if g else 2, ls="--" if g else "-",
               label="%s seed %s" % ("governor" if g else "controller",
                                     r.seed if r.seed is not None else "-"))
    a.set_title("energy per valid training token")
    a.set_ylabel("J / token")
    for a in upd_axes:
        a.set_xlabel("update")
        a.set_xlim(0, xmax)
        a.grid(color="#dddddd")
        if a.get_legend_handles_labels()[0]:
            a.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    fig.tight_layout()
    return fig


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m eerl.report",
                                 description="Draws the eerl report (the pictures of "
                                             "`eerl report`) from runtime traces.")
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
    except ValueError as e:
        print("python -m eerl.report: %s" % e, file=sys.stderr)
        return 1
    tmp = out + ".tmp" + ext
    try:
        fig.savefig(tmp, format=ext[1:], dpi=100)
        os.replace(tmp, out)
    except OSError as e:
        print("python -m eerl.report: cannot write %s: %s" % (out, e.strerror), file=sys.stderr)
        if os.path.exists(tmp):
            os.remove(tmp)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
