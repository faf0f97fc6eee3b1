#!/usr/bin/env python3
"""Summarizes a TRL GRPO run made by tools/h200/trl_grpo.py (tools/h200/trl_run.sh): per update,
eerl's energy (its trace) against Zeus's ZeusMonitor window and the independent pynvml reading of
the NVML energy counter over the same update; the same per phase (eerl against Zeus); each
tool's cost on the training thread and eerl's sampler thread; eerl's overhead as a share of the
update. Prints Markdown; --plot FILE.png draws eerl against Zeus (and the counter) per update.

    python3 tools/h200/trl_summary.py RUNDIR [--from 2] [--plot eerl-vs-zeus.png]

RUNDIR holds trace.jsonl, log.jsonl, costs.json and run.json (trl_grpo.py), and optionally
zeus.csv (ZeusMonitor's log, which places each generation on the clock) and samples.csv.gz
(tools/h200/sampler.py: the power at each update's end, the GPU's utilization during
generation). The counter reference is the difference of consecutive readings taken right after
eerl's update marks (log.jsonl's ref_counter_mj).
"""
import argparse
import bisect
import csv
import gzip
import json
import os
import statistics as st
import sys

PHASES = ["generation", "logprob", "training", "refit", "other"]


def read_jsonl(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        sys.exit("trl_summary.py: cannot read %s: %s" % (path, e))


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("trl_summary.py: cannot read %s: %s" % (path, e))


def load(rundir):
    if not os.path.isdir(rundir):
        sys.exit("trl_summary.py: %s is not a folder" % rundir)
    trace = read_jsonl(os.path.join(rundir, "trace.jsonl"))
    log = read_jsonl(os.path.join(rundir, "log.jsonl"))
    costs = read_json(os.path.join(rundir, "costs.json"))
    run = read_json(os.path.join(rundir, "run.json"))
    ups = {t["update"]: t for t in trace if t.get("type") == "update"}
    if not ups:
        sys.exit("trl_summary.py: %s has no update lines" % os.path.join(rundir, "trace.jsonl"))
    samples = None
    for name in ("samples.csv.gz", "samples.csv"):
        path = os.path.join(rundir, name)
        if os.path.exists(path):
            opener = gzip.open if name.endswith(".gz") else open
            with opener(path, "rt") as f:
                samples = [(float(r["mono"]), float(r["power_inst_w"] or r["power_w"]),
                            int(r["util_gpu"])) for r in csv.DictReader(f)]
            samples.sort()
            break
    zeus = None
    path = os.path.join(rundir, "zeus.csv")
    if os.path.exists(path):
        with open(path) as f:
            zeus = sorted(((r["window_name"], float(r["start_time"]), float(r["elapsed_time"]))
                           for r in csv.DictReader(f)), key=lambda w: w[1])
    return ups, {r["update"]: r for r in log}, costs, run, samples, zeus


def pct(a, b):
    return 100.0 * (a / b - 1.0) if b else float("nan")


def corr(d):
    """Lag-1 correlation of a series (None when undefined)."""
    a, b = d[:-1], d[1:]
    if len(a) < 3 or st.pstdev(a) == 0 or st.pstdev(b) == 0:
        return None
    ma, mb = st.mean(a), st.mean(b)
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / len(a) / (st.pstdev(a) * st.pstdev(b))


def power_at(samples, t):
    """The sampler's power (W) nearest before t, or None."""
    if not samples:
        return None
    i = bisect.bisect_right([s[0] for s in samples], t) - 1
    return samples[i][1] if i >= 0 and t - samples[i][0] < 0.5 else None


def rows_of(ups, log, first):
    """One row per update from `first` on. The counter reference is the difference of the
    counter readings taken right after eerl's update mark at this update's end and the previous
    one's (ref_counter_mj), so the reference is continuous; the first update logged has no
    previous reading and uses its ref_energy_mj."""
    rows = []
    prev_counter = prev_before = None
    for k in sorted(log):
        r = log[k]
        counter = r.get("ref_counter_mj")
        before = r.get("ref_before_mj")
        if counter is not None and prev_counter is not None:
            ref = (counter - prev_counter) / 1000.0
        elif r.get("ref_energy_mj"):
            ref = sum(r["ref_energy_mj"]) / 1000.0
        else:
            ref = None
        # the bracket (runs that read the counter right before eerl's update mark too): eerl's
        # readings at both ends lie between a before and an after read, so its update energy
        # lies in [before - previous after, after - previous before]
        bracket = None
        if None not in (counter, before, prev_counter, prev_before):
            bracket = ((before - prev_counter) / 1000.0, (counter - prev_before) / 1000.0)
        prev_counter, prev_before = counter, before
        if k < first or k not in ups:
            continue
        u = ups[k]
        z = r["zeus"]["energy_j"] if r.get("zeus") else None
        m = r["mono"]  # [previous boundary, before eerl's update_end, after it, after the
        # reference read, after Zeus's end_window]
        rows.append({"k": k, "time": u["time_s"], "eerl": u["energy_j"], "ref": ref, "zeus": z,
                     "t_eerl": u["runtime"]["t_end"], "t_ref": m[2], "t_zeus": m[4],
                     "zeus_s": r["zeus"]["time_s"] if r.get("zeus") else None,
                     "phases_e": u.get("phases", {}), "phases_z": (r.get("zeus") or {})
                     .get("phases", {}), "work": u["work"], "cost": r.get("cost", {}),
                     "ov": r.get("eerl_overhead"), "bracket": bracket})
    return rows


def bracket_table(rows):
    """eerl against the bracketing reference: how far its update energy lies outside the
    interval the counter readings around its marks allow (0 inside), and how wide that
    interval is (0 where the counter did not step around either mark)."""
    rs = [r for r in rows if r["bracket"] is not None]
    if not rs:
        return None
    out_pct, widths = [], []
    for r in rs:
        lo, hi = r["bracket"]
        outside = max(lo - r["eerl"], r["eerl"] - hi, 0.0)
        out_pct.append(100.0 * outside / ((lo + hi) / 2))
        widths.append(hi - lo)
    exact = sum(w < 1e-9 for w in widths)
    fig = {"n": len(rs), "within_0.5": sum(v <= 0.5 for v in out_pct),
           "max_outside_pct": max(out_pct), "exact": exact,
           "stepped": len(rs) - exact, "max_width_j": max(widths)}
    print("eerl against the bracketing reference (a counter read right before and right after "
          "eerl's update mark, so that eerl's own reading lies between them): over %d updates "
          "eerl lies within 0.5%% of the interval the readings allow on **%d**, worst %.3f%% "
          "outside it; the interval is one value on %d updates (the counter did not step around "
          "either mark) and wider on %d (at most %.1f J).\n"
          % (fig["n"], fig["within_0.5"], fig["max_outside_pct"], exact, fig["stepped"],
             fig["max_width_j"]))
    return fig


def meter_table(rows, samples):
    print("### Per update: eerl, Zeus and the NVML counter\n")
    print("eerl: its trace's update energy (marks at eerl's phase and update boundaries, which read "
          "the counter). Zeus: a ZeusMonitor window opened and closed right after eerl's update "
          "mark. counter: pynvml's nvmlDeviceGetTotalEnergyConsumption difference, read right "
          "after eerl's mark. Offsets: how much later than eerl's mark the reference and Zeus "
          "read, at this update's end (ms).\n")
    print("| update | s | G | N | eerl J | counter J | Zeus J | eerl vs counter | eerl vs Zeus "
          "| Zeus vs counter | ref offset ms | Zeus offset ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %d | %.2f | %d | %d | %.1f | %s | %s | %s | %s | %s | %.1f | %.1f |"
              % (r["k"], r["time"], r["work"]["G"], r["work"]["N"], r["eerl"],
                 "%.1f" % r["ref"] if r["ref"] is not None else "-",
                 "%.1f" % r["zeus"] if r["zeus"] is not None else "-",
                 "%+.3f%%" % pct(r["eerl"], r["ref"]) if r["ref"] is not None else "-",
                 "%+.3f%%" % pct(r["eerl"], r["zeus"]) if r["zeus"] is not None else "-",
                 "%+.3f%%" % pct(r["zeus"], r["ref"]) if r["zeus"] is not None and
                 r["ref"] is not None else "-",
                 1000 * (r["t_ref"] - r["t_eerl"]), 1000 * (r["t_zeus"] - r["t_eerl"])))
    print()
    print("| pair | updates | sum A J | sum B J | sum diff | median abs diff | max abs diff "
          "| updates > 0.5% | adjacent corr |")
    print("|---|---|---|---|---|---|---|---|---|")
    out = {}
    for name, a, b in (("eerl vs counter", "eerl", "ref"), ("eerl vs Zeus", "eerl", "zeus"),
                       ("Zeus vs counter", "zeus", "ref")):
        xs = [(r[a], r[b]) for r in rows if r[a] is not None and r[b] is not None]
        if not xs:
            print("| %s | 0 | - | - | - | - | - | - | - |" % name)
            continue
        d = [pct(x, y) for x, y in xs]
        c = corr([x - y for x, y in xs])
        sa, sb = sum(x for x, _ in xs), sum(y for _, y in xs)
        out[name] = {"n": len(xs), "sum_a": sa, "sum_b": sb, "sum_pct": pct(sa, sb),
                     "median_abs": st.median(abs(v) for v in d), "max_abs": max(abs(v) for v in d),
                     "over": sum(abs(v) > 0.5 for v in d)}
        print("| %s | %d | %.1f | %.1f | %+.4f%% | %.3f%% | %.3f%% | %d | %s |"
              % (name, len(xs), sa, sb, pct(sa, sb), out[name]["median_abs"],
                 out[name]["max_abs"], out[name]["over"], "%.2f" % c if c is not None else "-"))
    print()
    # Where two readers differ by more than 0.5%: the counter readings around that update's
    # boundaries. NVML's counter moves in steps (about every 100 ms): a reader that reads a few
    # ms later than another can see one more step, which the next update gives back.
    flagged = [i for i, r in enumerate(rows) if r["zeus"] is not None and r["ref"] is not None
               and (abs(pct(r["eerl"], r["zeus"])) > 0.5 or abs(pct(r["eerl"], r["ref"])) > 0.5
                    or abs(pct(r["zeus"], r["ref"])) > 0.5)]
    if flagged:
        print("Updates where two readers differ by more than 0.5%, with each reader's difference "
              "from the counter reference (J), how much later than eerl's mark Zeus read at the "
              "update's end, and the power there (the sampler's, when present) times 0.1 s, the "
              "counter's update interval:\n")
        print("| update | eerl - counter J | Zeus - counter J | Zeus - counter J, next update "
              "| Zeus read after eerl's mark, ms | power at the end W | power x 0.1 s J |")
        print("|---|---|---|---|---|---|---|")
        for i in flagged:
            r = rows[i]
            nxt = rows[i + 1] if i + 1 < len(rows) else None
            p = power_at(samples, r["t_eerl"])
            print("| %d | %+.1f | %+.1f | %s | %.1f | %s | %s |"
                  % (r["k"], r["eerl"] - r["ref"], r["zeus"] - r["ref"],
                     "%+.1f" % (nxt["zeus"] - nxt["ref"]) if nxt else "-",
                     1000 * (r["t_zeus"] - r["t_eerl"]), "%.0f" % p if p else "-",
                     "%.1f" % (0.1 * p) if p else "-"))
        print()
    return out


def phase_table(rows):
    print("### Per phase: eerl against Zeus (updates %d-%d summed)\n" % (rows[0]["k"], rows[-1]["k"]))
    print("Zeus: one window per phase segment, opened and closed right after eerl's phase marks; a "
          "phase's segments in an update are summed.\n")
    print("| phase | eerl s | Zeus s | eerl J | Zeus J | diff | Zeus windows | eerl mean W |")
    print("|---|---|---|---|---|---|---|---|")
    out = {}
    for ph in PHASES:
        es = sum(r["phases_e"].get(ph, {}).get("time_s", 0.0) for r in rows)
        ee = sum(r["phases_e"].get(ph, {}).get("energy_j", 0.0) for r in rows)
        zs = sum(r["phases_z"].get(ph, {}).get("time_s", 0.0) for r in rows)
        ze = sum(r["phases_z"].get(ph, {}).get("energy_j", 0.0) for r in rows)
        zn = sum(r["phases_z"].get(ph, {}).get("n", 0) for r in rows)
        if es == 0 and zs == 0:
            continue
        out[ph] = {"eerl_s": es, "zeus_s": zs, "eerl_j": ee, "zeus_j": ze, "windows": zn}
        print("| %s | %.2f | %.2f | %.1f | %.1f | %s | %d | %.1f |"
              % (ph, es, zs, ee, ze, "%+.3f%%" % pct(ee, ze) if ze else "-", zn,
                 ee / es if es else float("nan")))
    te = sum(r["time"] for r in rows)
    ph_e = sum(v["eerl_j"] for v in out.values())
    print("| outside phases (eerl: update minus phases) | %.2f | | %.1f | | | | |\n"
          % (te - sum(v["eerl_s"] for v in out.values()),
             sum(r["eerl"] for r in rows) - ph_e))
    return out


def cost_table(rows, costs, run):
    print("### Cost of each tool\n")
    n = len(rows)
    t_upd = sum(r["time"] for r in rows)
    cats = [("eerl_session", "eerl: session calls (marks, update end; C)"),
            ("eerl_hook", "eerl: the TRL hook's own Python (wrappers, work count, callback)"),
            ("zeus", "Zeus: ZeusMonitor begin/end_window (sync_execution=%s)"
             % run.get("zeus_sync")),
            ("reference", "reference: pynvml counter read")]
    print("Exclusive time on the training thread over updates %d-%d (%d updates, %.1f s): wall "
          "(what the loop waits) and CPU (time.thread_time).\n" % (rows[0]["k"], rows[-1]["k"], n,
                                                                   t_upd))
    print("| what | calls per update | wall ms per update | CPU ms per update | wall, share of "
          "update time |")
    print("|---|---|---|---|---|")
    out = {}
    for cat, name in cats:
        w = sum(r["cost"].get(cat, [0, 0, 0])[0] for r in rows)
        c = sum(r["cost"].get(cat, [0, 0, 0])[1] for r in rows)
        k = sum(r["cost"].get(cat, [0, 0, 0])[2] for r in rows)
        out[cat] = {"wall_s": w, "cpu_s": c, "calls": k, "share": w / t_upd}
        print("| %s | %.1f | %.2f | %.2f | %.3f%% |" % (name, k / n, 1000 * w / n, 1000 * c / n,
                                                        100 * w / t_upd))
    per = [(r["cost"].get("eerl_session", [0])[0] + r["cost"].get("eerl_hook", [0])[0])
           / r["time"] for r in rows]
    out["eerl_share"] = {"total": (out["eerl_session"]["wall_s"] + out["eerl_hook"]["wall_s"])
                         / t_upd, "median": st.median(per), "max": max(per)}
    print("| **eerl in all (session + hook)** | | %.2f | %.2f | **%.3f%%** (per update: median "
          "%.3f%%, max %.3f%%) |\n"
          % (1000 * (out["eerl_session"]["wall_s"] + out["eerl_hook"]["wall_s"]) / n,
             1000 * (out["eerl_session"]["cpu_s"] + out["eerl_hook"]["cpu_s"]) / n,
             100 * out["eerl_share"]["total"], 100 * st.median(per), 100 * max(per)))
    ov = [r for r in rows if r.get("ov")]
    if ov:
        per_ov = [r["ov"]["s"] / r["time"] for r in ov]
        w = sum(r["ov"]["s"] for r in ov)
        out["eerl_own"] = {"wall_s": w, "calls": sum(r["ov"]["calls"] for r in ov),
                           "share": w / sum(r["time"] for r in ov), "median": st.median(per_ov),
                           "max": max(per_ov), "updates": len(ov)}
        print("eerl's own timing of its calls on the training thread (eerl.Session's "
              "eerl/overhead_s: the session's phase, update and metrics calls, wall time), over "
              "%d updates: %.1f calls and %.2f ms per update, **%.3f%% of update time** (per "
              "update: median %.3f%%, max %.3f%%).\n"
              % (len(ov), out["eerl_own"]["calls"] / len(ov), 1000 * w / len(ov),
                 100 * out["eerl_own"]["share"], 100 * st.median(per_ov), 100 * max(per_ov)))
    th = costs.get("eerl_threads", {})
    for tid, v in th.items():
        if v.get("cpu_s") is not None and v.get("over_s"):
            print("eerl's thread %s (%s): %.3f s CPU over %.1f s = %.3f%% of one core"
                  % (tid, v["name"], v["cpu_s"], v["over_s"], 100 * v["cpu_s"] / v["over_s"]))
            out.setdefault("threads", []).append(v)
    if costs.get("process_cpu_s") is not None and costs.get("train_s"):
        print("\nThe whole process during training: %.1f s CPU over %.1f s."
              % (costs["process_cpu_s"], costs["train_s"]))
    for what, why in costs.get("unavailable", {}).items():
        print("\n%s was unavailable: %s" % (what, why))
    print()
    return out


def corr_of(xs, ys):
    mx, my = st.mean(xs), st.mean(ys)
    sx = sum((x - mx) ** 2 for x in xs) ** 0.5
    sy = sum((y - my) ** 2 for y in ys) ** 0.5
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (sx * sy) if sx and sy else None


def generation_windows(rows, log, zeus):
    """{update: (t0, t1)} of each update's generation on CLOCK_MONOTONIC, from Zeus's phase
    windows (zeus.csv, wall-clock starts) shifted by the median offset between Zeus's update
    windows and the log's boundary stamps (Zeus's update window k opens right after update k-1
    ends: log[k-1]["mono"][4])."""
    ups = [w for w in zeus if w[0] == "update"]
    gens = [w for w in zeus if w[0] == "phase:generation"]
    offs = [ups[k][1] - log[k - 1]["mono"][4] for k in range(1, len(ups)) if k - 1 in log]
    if not offs or len(gens) != len(ups):
        return {}
    off = st.median(offs)
    return {k: (gens[k][1] - off, gens[k][1] - off + gens[k][2]) for k in range(len(gens))}


def spread_table(rows, log, samples, zeus):
    """What the token counts do not explain: the spread of generation time (every update runs
    to the completion limit) and of log-probs + training, and the GPU's idle share during
    generation from the sampler."""
    gen = [r["phases_e"].get("generation", {}).get("time_s", 0.0) for r in rows]
    sc = [r["phases_e"].get("logprob", {}).get("time_s", 0.0)
          + r["phases_e"].get("training", {}).get("time_s", 0.0) for r in rows]
    G = [r["work"]["G"] for r in rows]
    L = [r["work"]["L"] for r in rows]
    out = {"gen_median": st.median(gen), "gen_min": min(gen), "gen_max": max(gen),
           "gen_mad": st.median(abs(x - st.median(gen)) for x in gen),
           "score_median": st.median(sc), "score_mad": st.median(abs(x - st.median(sc))
                                                                 for x in sc),
           "gen_corr_G": corr_of(gen, G), "L_min": min(L), "L_max": max(L)}
    print("### Phase-time spread that the token counts do not explain (updates %d-%d)\n"
          % (rows[0]["k"], rows[-1]["k"]))
    print("| what | median | min-max | median abs deviation |")
    print("|---|---|---|---|")
    print("| generation s (L %d-%d tokens; correlation with G %s) | %.2f | %.2f-%.2f | %.3f |"
          % (out["L_min"], out["L_max"], "%.2f" % out["gen_corr_G"] if out["gen_corr_G"]
             is not None else "-", out["gen_median"], out["gen_min"], out["gen_max"],
             out["gen_mad"]))
    print("| log-probs + training s | %.3f | %.3f-%.3f | %.4f |"
          % (out["score_median"], min(sc), max(sc), out["score_mad"]))
    win = generation_windows(rows, log, zeus) if zeus and samples else {}
    if win:
        ts = [x[0] for x in samples]
        idle, gk = [], []
        for r, g in zip(rows, gen):
            if r["k"] not in win:
                continue
            t0, t1 = win[r["k"]]
            u = [x[2] for x in samples[bisect.bisect_left(ts, t0 + 0.3):
                                       bisect.bisect_left(ts, t1 - 0.1)]]
            if u:
                idle.append(sum(x < 50 for x in u) / len(u))
                gk.append(g)
        if idle:
            out["gen_low_util_share"] = [min(idle), max(idle)]
            out["gen_corr_low_util"] = corr_of(gk, idle)
            print("| share of generation's 50 ms samples under 50%% GPU utilization "
                  "(correlation with generation time %.2f) | %.2f | %.2f-%.2f | |"
                  % (out["gen_corr_low_util"], st.median(idle), min(idle), max(idle)))
    print()
    return out


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ks = [r["k"] for r in rows]
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(10, 7), sharex=True,
                                 gridspec_kw={"height_ratios": [3, 2]})
    ax.plot(ks, [r["eerl"] / 1000 for r in rows], "o-", color="tab:blue", label="eerl (trace)")
    if any(r["zeus"] is not None for r in rows):
        ax.plot(ks, [r["zeus"] / 1000 if r["zeus"] is not None else float("nan") for r in rows],
                "x--", color="tab:orange", label="Zeus (ZeusMonitor window)", ms=8)
    if any(r["ref"] is not None for r in rows):
        ax.plot(ks, [r["ref"] / 1000 if r["ref"] is not None else float("nan") for r in rows],
                ".", color="black", label="NVML counter (pynvml)", ms=4)
    ax.set_ylabel("energy per update, kJ")
    ax.set_title("TRL GRPOTrainer on one H200, observe-only: energy of each update "
                 "(eerl, Zeus, NVML counter)")
    ax.legend(loc="best")
    ax.grid(alpha=0.3)
    if any(r["zeus"] is not None for r in rows):
        bx.plot(ks, [pct(r["eerl"], r["zeus"]) if r["zeus"] is not None else float("nan")
                     for r in rows], "o-", color="tab:orange", label="eerl vs Zeus")
    if any(r["ref"] is not None for r in rows):
        bx.plot(ks, [pct(r["eerl"], r["ref"]) if r["ref"] is not None else float("nan")
                     for r in rows], ".-", color="black", label="eerl vs counter", lw=0.8)
    for r in rows:  # label the big ones with what Zeus's window differs from the counter by
        if r["zeus"] is not None and r["ref"] is not None and abs(pct(r["eerl"], r["zeus"])) > 0.5:
            y = pct(r["eerl"], r["zeus"])
            bx.annotate("Zeus %+.0f J" % (r["zeus"] - r["ref"]), (r["k"], y),
                        textcoords="offset points", xytext=(6, -4 if y < 0 else 2), fontsize=8,
                        color="tab:orange")
    bx.set_title("difference from eerl; labels: Zeus's window minus the counter reading, where "
                 "beyond 0.5%", fontsize=9)
    bx.axhline(0.5, color="gray", ls=":", lw=1)
    bx.axhline(-0.5, color="gray", ls=":", lw=1, label="±0.5%")
    bx.margins(y=0.15)
    bx.set_ylabel("difference, %")
    bx.set_xlabel("update")
    bx.legend(loc="best")
    bx.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rundir")
    ap.add_argument("--from", dest="first", type=int, default=2,
                    help="first update counted (default 2: 0 and 1 are warm-up)")
    ap.add_argument("--plot", default=None, help="write the eerl-vs-Zeus plot here (.png)")
    ap.add_argument("--json", default=None, help="also write the figures here (JSON)")
    a = ap.parse_args()
    ups, log, costs, run, samples, zeus = load(a.rundir)
    rows = rows_of(ups, log, a.first)
    if not rows:
        sys.exit("trl_summary.py: no update from %d on in %s" % (a.first, a.rundir))
    print("## TRL GRPO run %s: %d updates (%d counted from update %d), %.2f s per update\n"
          % (os.path.basename(os.path.normpath(a.rundir)), len(ups), len(rows), a.first,
             st.mean(r["time"] for r in rows)))
    v = run.get("versions", {})
    print("Model: %.1f M parameters (%s), %d sequences per update, completions up to %d tokens; "
          "%s.\n" % (run["params"] / 1e6, ", ".join("%s %s" % kv for kv in sorted(
              run.get("dims", {}).items())), run["sequences_per_update"],
              run["args"]["max_completion"], ", ".join("%s %s" % kv for kv in sorted(v.items()))))
    figs = {"updates": len(ups), "counted": len(rows),
            "time_s_mean": st.mean(r["time"] for r in rows),
            "time_s_min": min(r["time"] for r in rows)}
    figs["meter"] = meter_table(rows, samples)
    figs["bracket"] = bracket_table(rows)
    figs["phases"] = phase_table(rows)
    figs["costs"] = cost_table(rows, costs, run)
    figs["spread"] = spread_table(rows, log, samples, zeus)
    if a.plot:
        plot(rows, a.plot)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(figs, f, indent=1)


if __name__ == "__main__":
    main()
