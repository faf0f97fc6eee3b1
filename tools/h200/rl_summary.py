#!/usr/bin/env python3
"""Summarizes a real GRPO run made by tools/h200/rl_run.sh: eerl's per-update energy against the
independent pynvml reading of the same counters, the governor's phase power profile (time and
power per phase from eerl's trace; SM clock, utilization and throttle reasons from the NVML
sampler), in a disaggregated run each pool's waiting energy and arrival at the rendezvous, and
the spread of the phase times that token counts do not explain (what limits a work-based
predictor: docs/validation/validation.md). Prints Markdown; with --plot FILE.png also draws the profile
(matplotlib).

    /usr/bin/python3 tools/h200/rl_summary.py RUNDIR [--from 2] [--to N] [--low-w 300]
                                             [--plot profile.png]

RUNDIR holds trace.jsonl (eerl), log.jsonl (grpo_tiny --log, with --nvml-reference) and
samples.csv or samples.csv.gz (tools/h200/sampler.py).
"""
import argparse
import bisect
import csv
import gzip
import os
import statistics as st
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runfiles  # noqa: E402

PHASES = ["generation", "logprob", "training", "refit", "waiting"]
# NVML clock event (throttle) reason bits, nvml.h
REASONS = [(0x1, "gpu_idle"), (0x2, "app_clocks"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"),
           (0x10, "sync_boost"), (0x20, "sw_thermal"), (0x40, "hw_thermal"),
           (0x80, "hw_power_brake"), (0x100, "display_clock")]


def load(rundir):
    run, ups, log = runfiles.load_run(rundir, "rl_summary.py")
    for name in ("samples.csv", "samples.csv.gz"):
        path = os.path.join(rundir, name)
        if os.path.exists(path):
            opener = gzip.open if name.endswith(".gz") else open
            with opener(path, "rt") as f:
                samples = list(csv.DictReader(f))
            break
    else:
        sys.exit("rl_summary.py: %s has no samples.csv(.gz)" % rundir)
    return run, ups, log, samples


def windows(rec):
    """(phase, t0, t1) on CLOCK_MONOTONIC from grpo_tiny's boundary stamps; the gap between
    phases (reward, packing) counts as waiting, which here is short."""
    m = rec["mono"]
    return [("generation", m[0], m[1]), ("logprob", m[1], m[2]), ("training", m[2], m[3]),
            ("refit", m[3], m[4])]


def pct(x):
    return "%+.3f%%" % x


def boundary(e, r):
    """Median and largest distance of the running sum of (e - r) from its median, J."""
    run, acc = [], 0.0
    for x, y in zip(e, r):
        acc += x - y
        run.append(acc)
    m = st.median(run)
    dev = [abs(v - m) for v in run]
    return st.median(dev), max(dev)


def corr_text(e, r):
    """Lag-1 correlation of the per-update differences e - r, as text ("-" when undefined)."""
    d = [x - y for x, y in zip(e, r)]
    a, b = d[:-1], d[1:]
    if len(a) < 3 or st.pstdev(a) == 0 or st.pstdev(b) == 0:
        return "-"
    ma, mb = st.mean(a), st.mean(b)
    c = sum((x - ma) * (y - mb) for x, y in zip(a, b)) / len(a) / (st.pstdev(a) * st.pstdev(b))
    return "%.2f" % c


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rundir")
    ap.add_argument("--from", dest="first", type=int, default=2,
                    help="first update counted (default 2: 0 and 1 are warm-up)")
    ap.add_argument("--to", dest="last", type=int, default=None,
                    help="last update counted (default: the run's last)")
    ap.add_argument("--low-w", type=float, default=300.0,
                    help="power (W) below which the start of generation counts as a low stretch")
    ap.add_argument("--plot", default=None, help="write the phase profile plot here (.png)")
    a = ap.parse_args()
    run, ups, log, samples = load(a.rundir)
    pools = run.get("pools", {"generation": [0], "training": [0]})
    gpus = sorted(set(pools.get("generation", [0]) + pools.get("training", [0])))
    disagg = run.get("mode") == "disaggregated"
    keys = [k for k in sorted(ups)
            if k >= a.first and (a.last is None or k <= a.last) and k in log]
    if not keys:
        sys.exit("rl_summary.py: no update in --from %d --to %s in %s"
                 % (a.first, a.last, a.rundir))
    print("## %s: %s, %d updates (%d counted from update %d), GPUs %s\n"
          % (os.path.basename(os.path.normpath(a.rundir)), run.get("mode", "?"), len(ups),
             len(keys), a.first, ",".join(map(str, gpus))))

    # 1. the meter against the independent reading of the same counters
    rows = []
    for k in keys:
        ref = log[k].get("ref_energy_mj")
        if not ref:
            continue
        u = ups[k]
        if disagg:
            mine = [u["pools"]["generation"]["energy_j"], u["pools"]["training"]["energy_j"]]
        else:
            mine = [u["energy_j"]]
        rows.append((k, mine, [r / 1000.0 for r in ref]))
    if rows:
        print("### eerl's meter against an independent NVML reading (per update)\n")
        print("| window | updates | eerl J (sum) | reference J (sum) | sum diff | median abs diff "
              "| max abs diff | updates > 0.5% | boundary J, median [max] | adjacent corr |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        cols = [("whole allocation", None)]
        if disagg:
            cols += [("generation GPU", 0), ("training GPU", 1)]
        for name, i in cols:
            e = [sum(m) if i is None else m[i] for _, m, _ in rows]
            r = [sum(x) if i is None else x[i] for _, _, x in rows]
            d = [100 * (x / y - 1) for x, y in zip(e, r)]
            bmed, bmax = boundary(e, r)
            print("| %s | %d | %.1f | %.1f | %s | %.3f%% | %.3f%% | %d | %.1f [%.1f] | %s |"
                  % (name, len(d), sum(e), sum(r), pct(100 * (sum(e) / sum(r) - 1)),
                     st.median(abs(x) for x in d), max(abs(x) for x in d),
                     sum(abs(x) > 0.5 for x in d), bmed, bmax, corr_text(e, r)))
        print("\nboundary: the running sum of (eerl - reference) over the updates is the two "
              "readers' disagreement at one update boundary; its distance from its median, "
              "median and largest. adjacent corr: the correlation of adjacent updates' "
              "differences (-0.5 when each difference is two independent boundary errors).\n")

    # 2. the governor's phase profile
    ts = [float(s["mono"]) for s in samples]
    by = {}  # (gpu, phase) -> samples
    for k in keys:
        for ph, t0, t1 in windows(log[k]):
            for s in samples[bisect.bisect_left(ts, t0):bisect.bisect_left(ts, t1)]:
                by.setdefault((int(s["gpu"]), ph), []).append(s)
    print("### Phase profile under the default governor\n")
    print("Time and power per phase from eerl's trace (energy over time; in a disaggregated run "
          "each phase's pool); SM clock, utilization and throttle reasons from the 50 ms NVML "
          "sampler over the same windows (per GPU).\n")
    print("| phase | time per update s | share of update | eerl mean power W (whole allocation) |")
    print("|---|---|---|---|")
    tot = st.mean(ups[k]["time_s"] for k in keys)
    for ph in PHASES[:4]:
        t = [ups[k]["phases"].get(ph, {}).get("time_s", 0.0) for k in keys]
        e = [ups[k]["phases"].get(ph, {}).get("energy_j", 0.0) for k in keys]
        print("| %s | %.3f | %.1f%% | %.1f |" % (ph, st.mean(t), 100 * st.mean(t) / tot,
                                                 sum(e) / sum(t) if sum(t) > 0 else float("nan")))
    rest = st.mean(ups[k]["time_s"] - sum(v["time_s"] for v in ups[k]["phases"].values())
                   for k in keys)
    print("| other (between phases) | %.3f | %.1f%% | |" % (rest, 100 * rest / tot))
    print("| whole update | %.3f | 100%% | %.1f |\n"
          % (tot, sum(ups[k]["energy_j"] for k in keys) / sum(ups[k]["time_s"] for k in keys)))
    print("| GPU | phase | samples | mean power W (instant) | mean power W (NVML average) "
          "| SM clock MHz median [min-max] | GPU util % | throttle reasons (share of samples) |")
    print("|---|---|---|---|---|---|---|---|")
    prof = {}
    for g in gpus:
        for ph in PHASES[:4]:
            xs = by.get((g, ph), [])
            if not xs:
                continue
            inst = [float(s["power_inst_w"]) for s in xs if s["power_inst_w"]]
            avg = [float(s["power_w"]) for s in xs]
            sm = [int(s["sm_mhz"]) for s in xs]
            rs = []
            for bit, name in REASONS:
                n = sum(1 for s in xs if int(s["reasons"]) & bit)
                if n:
                    rs.append("%s %.0f%%" % (name, 100.0 * n / len(xs)))
            prof[(g, ph)] = (st.mean(inst) if inst else float("nan"), st.median(sm))
            print("| %d | %s | %d | %.0f | %.0f | %d [%d-%d] | %.0f | %s |"
                  % (g, ph, len(xs), prof[(g, ph)][0], st.mean(avg), st.median(sm), min(sm),
                     max(sm), st.mean(int(s["util_gpu"]) for s in xs), ", ".join(rs) or "none"))
    print()

    # 3. disaggregated: waiting energy and arrivals
    if disagg:
        print("### Two pools: arrivals at the rendezvous and the waiting GPU\n")
        print("Arrival: seconds after the update began at which the pool finished its work "
              "(generation pool: end of generation; training pool: end of training), from the "
              "loop's phase stamps. Waiting: the part of the update in which the pool runs none "
              "of its own phases (refit counts as work for both); its energy is the sampler's "
              "instantaneous power integrated over those stretches (50 ms steps), the pool's "
              "energy eerl's.\n")
        print("| pool | arrival s (mean, min-max) | waiting s per update | waiting energy J per "
              "update | waiting power W | share of the pool's energy (eerl) |")
        print("|---|---|---|---|---|---|")
        per_gpu = {}
        for s_ in samples:
            if s_["power_inst_w"]:
                per_gpu.setdefault(int(s_["gpu"]), []).append(
                    (float(s_["mono"]), float(s_["power_inst_w"])))
        for name, own, stamp in (("generation", ("generation", "refit"), 1),
                                 ("training", ("logprob", "training", "refit"), 3)):
            g = pools[name][0]
            pts = per_gpu.get(g, [])
            tt = [t for t, _ in pts]
            arr, wt, we, pe = [], [], [], []
            for k in keys:
                m = log[k]["mono"]
                arr.append(m[stamp] - m[0])
                busy = [(b, e) for ph, b, e in windows(log[k]) if ph in own]
                i = bisect.bisect_left(tt, m[0])
                j = bisect.bisect_left(tt, m[4])
                w_s = w_j = 0.0
                for (t, pw), (t2, _) in zip(pts[i:j], pts[i + 1:j + 1]):
                    if not any(b <= t < e for b, e in busy):
                        w_s += t2 - t
                        w_j += pw * (t2 - t)
                wt.append(w_s)
                we.append(w_j)
                pe.append(ups[k]["pools"][name]["energy_j"])
            print("| %s (GPU %d) | %.2f (%.2f-%.2f) | %.2f | %.0f | %.0f | %.1f%% |"
                  % (name, g, st.mean(arr), min(arr), max(arr), st.mean(wt), st.mean(we),
                     sum(we) / sum(wt) if sum(wt) > 0 else float("nan"), 100 * sum(we) / sum(pe)))
        print()

    spread(a, ups, log, samples, ts, keys, pools)
    if a.plot:
        plot(a, ups, log, samples, ts, keys, gpus, prof)


def mad(v):
    """Median absolute deviation around the median."""
    m = st.median(v)
    return st.median(abs(x - m) for x in v)


def spread(a, ups, log, samples, ts, keys, pools):
    """What token counts leave unexplained: generation time around its median, log-probs plus
    training around their least-squares line on N, and the stretch at the start of generation
    in which the generation GPUs draw less than --low-w."""
    gen = [ups[k]["phases"]["generation"]["time_s"] for k in keys]
    sc = [ups[k]["phases"].get("logprob", {}).get("time_s", 0.0)
          + ups[k]["phases"].get("training", {}).get("time_s", 0.0) for k in keys]
    def line(xs):
        """Least-squares line of the scoring time on xs: (slope, residuals)."""
        mx, ms = st.mean(xs), st.mean(sc)
        sxx = sum((x - mx) ** 2 for x in xs)
        b = sum((x - mx) * (y - ms) for x, y in zip(xs, sc)) / sxx if sxx > 0 else 0.0
        return b, [y - ms - b * (x - mx) for x, y in zip(xs, sc)]

    b, res = line([ups[k]["work"]["N"] for k in keys])
    # The scoring work the runs since c09478c log: prompt + response tokens of the scored rows,
    # and the padded positions the kernels run over.
    work = [(name, line([log[k][name] for k in keys])) for name in ("score_tokens",
                                                                    "padded_tokens")
            if all(name in log[k] for k in keys)]
    low = []
    gg = set(pools.get("generation", [0]))
    for k in keys:
        t0, t1 = log[k]["mono"][0], log[k]["mono"][1]
        w = [s for s in samples[bisect.bisect_left(ts, t0):bisect.bisect_left(ts, t1)]
             if int(s["gpu"]) in gg]
        first = next((float(s["mono"]) for s in w if float(s["power_inst_w"]) >= a.low_w), None)
        if first is not None:
            low.append(first - t0)
    print("### Phase-time spread that the token counts do not explain (updates %d-%d)\n"
          % (keys[0], keys[-1]))
    print("| what | median | median abs deviation |")
    print("|---|---|---|")
    print("| generation time s | %.3f | %.4f |" % (st.median(gen), mad(gen)))
    print("| log-probs + training s, around a line on N (%.3g s per 1e5 tokens) | %.3f | %.4f |"
          % (1e5 * b, st.median(sc), mad(res)))
    for name, (bw, rw) in work:
        print("| log-probs + training s, around a line on %s (%.3g s per 1e5) | %.3f | %.4f |"
              % (name, 1e5 * bw, st.median(sc), mad(rw)))
    if low:
        q = sorted(low)
        print("| start of generation below %.0f W, s (10th-90th percentile %.2f-%.2f) | %.3f | "
              "%.4f |" % (a.low_w, q[len(q) // 10], q[(9 * len(q)) // 10], st.median(low),
                          mad(low)))
    print()


def plot(a, ups, log, samples, ts, keys, gpus, prof):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colors = {"generation": "tab:blue", "logprob": "tab:orange", "training": "tab:green",
              "refit": "tab:red"}
    fig, axes = plt.subplots(len(gpus) + 1, 1, figsize=(11, 3.0 * (len(gpus) + 1)))
    span = keys[:4]
    t0 = log[span[0]]["mono"][0]
    for ax, g in zip(axes, gpus):
        xs = [s for s in samples[bisect.bisect_left(ts, t0):
                                 bisect.bisect_left(ts, log[span[-1]]["mono"][4])]
              if int(s["gpu"]) == g and s["power_inst_w"]]
        ax.plot([float(s["mono"]) - t0 for s in xs], [float(s["power_inst_w"]) for s in xs],
                color="black", lw=0.8, label="power (W)")
        ax2 = ax.twinx()
        ax2.plot([float(s["mono"]) - t0 for s in xs], [int(s["sm_mhz"]) for s in xs],
                 color="gray", lw=0.8, ls="--", label="SM clock (MHz)")
        ax2.set_ylim(0, 2100)
        ax2.set_ylabel("SM MHz")
        for k in span:
            for ph, b, e in windows(log[k]):
                ax.axvspan(b - t0, e - t0, color=colors[ph], alpha=0.2, lw=0)
        ax.set_ylim(0, 720)
        ax.set_ylabel("W")
        ax.set_title("GPU %d under the governor, updates %d-%d (shaded: phases)"
                     % (g, span[0], span[-1]))
        ax.set_xlabel("seconds")
    ax = axes[-1]
    labels, pw, tm = [], [], []
    for g in gpus:
        for ph in ("generation", "logprob", "training", "refit"):
            if (g, ph) in prof:
                labels.append("GPU%d\n%s\n%d MHz" % (g, ph, prof[(g, ph)][1]))
                pw.append(prof[(g, ph)][0])
                tm.append(st.mean(ups[k]["phases"].get(ph, {}).get("time_s", 0) for k in keys))
    bars = ax.bar(range(len(pw)), pw,
                  color=[colors[l.split("\n")[1]] for l in labels])
    for b, t in zip(bars, tm):
        ax.text(b.get_x() + b.get_width() / 2, b.get_height() + 8, "%.2f s" % t, ha="center",
                fontsize=8)
    ax.set_xticks(range(len(pw)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("mean power W")
    ax.set_ylim(0, 720)
    ax.set_title("Mean power per phase (label: median SM clock; above: time per update)")
    fig.tight_layout()
    fig.savefig(a.plot, dpi=110)


if __name__ == "__main__":
    main()
