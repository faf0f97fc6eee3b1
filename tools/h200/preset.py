#!/usr/bin/env python3
"""Builds the twin's H200 preset for examples/grpo_tiny.py from a real observe-only run on an H200
(data/h200/grpo-2026-11-30/colocated-packed) and writes it into the twin's parameter file.

What is measured and what is assumed (docs/internals/twin.md, docs/validation/validation.md):

  measured (governor point, 1980 MHz, one H200)  the workload (320 sequences of lognormal length
      truncated at 1024; per update a lognormal fitted to its mean length and its share at the
      limit: the shape of one update's lengths, the median's drift over the run and the level
      wandering around it, an AR(2) process), each phase's time per update and its regression on the work
      (generation: the decode loop always runs to the longest response, so c_tail = time / L and
      c_tok = 0; log-probs: time per consumed token; training: a fixed part plus time per
      consumed token; refit and the rest: their means), each phase's mean power (eerl's energy
      over time) and the idle power of the H200 GPU entry (already ~125 W from the same card)
  assumed (carried from the fitted H100 preset of qwen3-30b-a3b, same Hopper chip family)  every
      phase's clock response (b, r), the split of phase power into the part that follows the SM
      clock (pw) and the part that does not (pm), the in-flight parameters (spill, if_tail, c_kv)

Only the model "grpo-tiny" and the preset "grpo-tiny/h200" are written; the rest of the file is
left as it is. tools/calibrate calls build() after its fit, so a refit keeps them.

    /usr/bin/python3 tools/h200/preset.py [--params data/twin/params.json] [--run DIR]
"""
import argparse
import copy
import json
import math
import os
import random
import statistics as st
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runfiles  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = os.path.join(ROOT, "data", "h200", "grpo-2026-11-30", "colocated-packed")
SEQS = 320        # grpo_tiny --config gpu: 40 prompts x 8 responses
RESPONSE_LIMIT = 1024
CARRY_FROM = "qwen3-30b-a3b/h100"


def _lognormal_fit(mean_len, trunc_share, limit):
    """Median and sigma of a lognormal whose draws, cut at limit, have this mean and this share at
    the limit (bisection on sigma; the share fixes the median for each sigma)."""
    def cut_mean(mu, s):
        # E[min(X, c)] for X ~ lognormal(mu, s)
        z = (math.log(limit) - mu) / s
        phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))
        return math.exp(mu + s * s / 2) * phi(z - s) + limit * (1 - phi(z))

    def mu_for(s):
        # share above the limit = 1 - Phi((ln c - mu)/s)  =>  mu = ln c - s * Phi^-1(1 - share)
        lo, hi = -10.0, 10.0
        for _ in range(200):
            mid = (lo + hi) / 2
            if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < 1 - trunc_share:
                lo = mid
            else:
                hi = mid
        return math.log(limit) - s * lo

    lo, hi = 0.05, 3.9
    for _ in range(200):
        s = (lo + hi) / 2
        if cut_mean(mu_for(s), s) > mean_len:
            lo = s
        else:
            hi = s
    s = (lo + hi) / 2
    return math.exp(mu_for(s)), s


def _linfit(x, y):
    mx, my = st.mean(x), st.mean(y)
    sxx = sum((a - mx) ** 2 for a in x)
    b = sum((a - mx) * (c - my) for a, c in zip(x, y)) / sxx if sxx > 0 else 0.0
    return my - b * mx, b


def _lag1(x):
    m = st.mean(x)
    d = [v - m for v in x]
    den = sum(v * v for v in d)
    return sum(a * b for a, b in zip(d[:-1], d[1:])) / den if den > 0 else 0.0


def _acf(x, k):
    m = st.mean(x)
    d = [v - m for v in x]
    den = sum(v * v for v in d)
    return sum(a * b for a, b in zip(d[:-k], d[k:])) / den if den > 0 else 0.0


ACF_LAGS = 6


def _ar2_sim(a1, a2, updates, paths):
    """Mean sd and autocorrelation (lags 1..ACF_LAGS) that runs of these updates of a stationary
    AR(2) process of unit sd show once detrended by a line, as the measurement is. Common random
    numbers (a fixed seed): the preset is reproducible and the fit's objective smooth."""
    rnd = random.Random(20261201)
    r1 = a1 / (1 - a2)
    e = math.sqrt((1 + a2) * ((1 - a2) ** 2 - a1 * a1) / (1 - a2))
    sd = 0.0
    acf = [0.0] * ACF_LAGS
    for _ in range(paths):
        x = [rnd.gauss(0, 1)]
        x.append(r1 * x[0] + math.sqrt(1 - r1 * r1) * rnd.gauss(0, 1))
        while len(x) < len(updates):
            x.append(a1 * x[-1] + a2 * x[-2] + e * rnd.gauss(0, 1))
        a, b = _linfit(updates, x)
        res = [v - a - b * u for u, v in zip(updates, x)]
        sd += st.pstdev(res) / paths
        for k in range(ACF_LAGS):
            acf[k] += _acf(res, k + 1) / paths
    return sd, acf


def _nelder_mead(f, x0, step, iters=80):
    """Minimises f over two variables (Nelder-Mead, deterministic)."""
    pts = [list(x0), [x0[0] + step, x0[1]], [x0[0], x0[1] + step]]
    val = [f(*p) for p in pts]
    for _ in range(iters):
        order = sorted(range(3), key=lambda i: val[i])
        pts, val = [pts[i] for i in order], [val[i] for i in order]
        c = [(pts[0][k] + pts[1][k]) / 2 for k in range(2)]
        r = [c[k] + (c[k] - pts[2][k]) for k in range(2)]
        fr = f(*r)
        if fr < val[0]:
            e = [c[k] + 2 * (c[k] - pts[2][k]) for k in range(2)]
            fe = f(*e)
            pts[2], val[2] = (e, fe) if fe < fr else (r, fr)
        elif fr < val[1]:
            pts[2], val[2] = r, fr
        else:
            k_ = [c[k] + 0.5 * (pts[2][k] - c[k]) for k in range(2)]
            fk = f(*k_)
            if fk < val[2]:
                pts[2], val[2] = k_, fk
            else:
                for i in (1, 2):
                    pts[i] = [pts[0][k] + 0.5 * (pts[i][k] - pts[0][k]) for k in range(2)]
                    val[i] = f(*pts[i])
    i = min(range(3), key=lambda i: val[i])
    return pts[i]


def _ar2_fit(x, updates, paths=100):
    """The stationary AR(2) (sd, ar1, ar2) whose detrended runs of these updates show, on average,
    the autocorrelation of x at lags 1..ACF_LAGS (least squares, Nelder-Mead from the Yule-Walker
    estimate) and its sd (the process is linear in sd). A short run of a persistent process
    understates both its spread and its correlation, which is why this is simulated."""
    want = [_acf(x, k) for k in range(1, ACF_LAGS + 1)]
    sds = {}

    def cost(a1, a2):
        if not (a2 > -0.98 and a1 + a2 < 0.98 and a2 - a1 < 0.98):
            return float("inf")
        sd, acf = _ar2_sim(a1, a2, updates, paths)
        sds[(a1, a2)] = sd
        return sum((p - q) ** 2 for p, q in zip(acf, want))

    r1, r2 = want[0], want[1]
    a1, a2 = _nelder_mead(cost, (r1 * (1 - r2) / (1 - r1 * r1), (r2 - r1 * r1) / (1 - r1 * r1)),
                          0.1)
    return st.pstdev(x) / sds[(a1, a2)], a1, a2, want


def length_level(G, trunc, updates):
    """The workload per update: a lognormal (median, sigma) fitted to each update's mean length and
    share at the limit; the shape of one update (median of the sigmas), the log median's line over
    the updates (median at update 0, drift) and the level wandering around it (its residuals: an
    AR(2) process fitted to their sd and autocorrelation by _ar2_fit), and how the shape moves with that level (slope of log sigma
    on the residual: a longer update is also a wider one). Lists per update, in order."""
    fits = []
    for g, n in zip(G, trunc):
        share = min(max(n, 0.5), SEQS - 0.5) / SEQS  # a share of 0 or 1 fixes no lognormal
        fits.append(_lognormal_fit(g / SEQS, share, RESPONSE_LIMIT))
    mu = [math.log(f[0]) for f in fits]
    mu0, drift = _linfit(updates, mu)
    x = [m - mu0 - drift * u for u, m in zip(updates, mu)]
    _, shape = _linfit(x, [math.log(f[1]) for f in fits])
    sd, a1, a2, acf = _ar2_fit(x, updates)
    return {"len_median": math.exp(mu0), "len_sigma": st.median(f[1] for f in fits),
            "drift": drift, "len_update_sd": sd, "len_update_ar1": a1, "len_update_ar2": a2,
            "len_update_shape": shape, "measured_sd": st.pstdev(x), "measured_acf": acf,
            "mu": mu, "sigma": [f[1] for f in fits]}


def measure(run):
    """The governor-point figures of one run: a dict of what build() uses."""
    _, ups, log = runfiles.load_run(run, "preset.py")
    keys = [k for k in sorted(ups) if k >= 2 and k in log]
    if len(keys) < 20:
        sys.exit("preset.py: %s has %d usable updates, need 20" % (run, len(keys)))
    G = [log[k]["G"] for k in keys]
    N = [log[k]["N"] for k in keys]
    L = [log[k]["L"] for k in keys]
    ph = lambda k, p, f: ups[k]["phases"].get(p, {}).get(f, 0.0)
    t = {p: [ph(k, p, "time_s") for k in keys] for p in ("generation", "logprob", "training",
                                                         "refit")}
    e = {p: [ph(k, p, "energy_j") for k in keys] for p in t}
    other = [ups[k]["time_s"] - sum(ph(k, p, "time_s") for p in t) for k in keys]
    mean_len = st.mean(G) / SEQS
    trunc = st.mean(log[k]["truncated"] for k in keys) / SEQS
    lv = length_level(G, [log[k]["truncated"] for k in keys], keys)
    tr0, ctr = _linfit(N, t["training"])
    return {
        "updates": len(keys), "first": keys[0], "last": keys[-1],
        "mean_len": mean_len, "trunc_share": trunc,
        **{k: lv[k] for k in ("len_median", "len_sigma", "drift", "len_update_sd",
                              "len_update_ar1", "len_update_ar2", "len_update_shape",
                              "measured_sd", "measured_acf")},
        "N_over_G": st.mean(n / g for n, g in zip(N, G)),
        "c_tail": st.mean(t["generation"]) / st.mean(L),
        "c_lp": st.mean(t["logprob"]) / st.mean(N),
        "c_tr": max(ctr, 0.0), "t_tr0": max(tr0, 0.0),
        "t_refit": st.mean(t["refit"]), "t_other": max(st.mean(other), 0.0),
        "time_s": {p: st.mean(v) for p, v in t.items()},
        "power_w": {p: sum(e[p]) / sum(t[p]) for p in t if sum(t[p]) > 0},
        "update_s": st.mean(ups[k]["time_s"] for k in keys),
        "update_j": st.mean(ups[k]["energy_j"] for k in keys),
    }


def build(params, run=RUN):
    """Adds model "grpo-tiny" and preset "grpo-tiny/h200" to params (a parsed parameter file)."""
    m = measure(run)
    base = params["presets"][CARRY_FROM]
    gpu = params["gpus"]["h200"]
    idle = gpu["p_static_w"] + gpu["p_idle_dyn_w"]  # an idle H200 at 1980 MHz, ~125 W
    p = copy.deepcopy(base)
    # The decode loop runs to the longest response whatever G is (fixed shapes): no G term.
    p["c_tail"], p["c_tok"] = m["c_tail"], 0.0
    p["c_lp"], p["c_tr"], p["t_tr0"] = m["c_lp"], m["c_tr"], m["t_tr0"]
    p["t_refit"], p["t_other"] = m["t_refit"], m["t_other"]
    # Drained-mode split of t_tr0 (docs/internals/twin.md): fitted on the paper's drained rows of
    # the H100 preset in seconds, so it does not carry to this measured t_tr0; no drained run measured.
    p.pop("t_tr_after", None)
    # Active power at the governor's clock (V = 1 at the top clock): idle + pm + pw; keep the H100
    # fit's split between the clock-following part (pw) and the rest (pm).
    for key, phase in (("gen", "generation"), ("logprob", "logprob"), ("train", "training")):
        above = max(m["power_w"][phase] - idle, 1.0)
        share = base[key]["pm"] / (base[key]["pm"] + base[key]["pw"])
        p[key]["pm"], p[key]["pw"] = above * share, above * (1 - share)
    p["refit"]["pw"] = max(m["power_w"].get("refit", idle) - idle, 0.0)
    p["source"] = {
        "measured": "%s, updates %d-%d (%d), governor at 1980 MHz: phase times, phase "
                    "powers, workload" % (os.path.relpath(os.path.abspath(run), ROOT).replace(
                        os.sep, "/"), m["first"], m["last"], m["updates"]),
        "assumed": "clock response (b, r), pw/pm split, spill, if_tail, c_kv from " + CARRY_FROM,
        "measured_update_s": m["update_s"], "measured_update_j": m["update_j"],
        "measured_phase_s": m["time_s"], "measured_phase_w": m["power_w"],
    }
    params.setdefault("models", {})["grpo-tiny"] = {
        "len_median": m["len_median"], "len_sigma": m["len_sigma"], "seq_limit": RESPONSE_LIMIT,
        "drift": m["drift"], "len_update_sd": m["len_update_sd"],
        "len_update_ar1": m["len_update_ar1"], "len_update_ar2": m["len_update_ar2"],
        "len_update_shape": m["len_update_shape"],
        "p_zero": 0.0, "dynamic_sampling_filter": False,
        "overlong_filter": True,
        # (P, K, B): grpo_tiny --config gpu is M
        "sizes": {"S": [20, 8, 160], "M": [40, 8, 320], "L": [80, 8, 640]},
    }
    # The per-update noise is fitted on the H200 traces separately (docs/validation/twin-fidelity.md):
    # keep the file's entry, never the H100 preset's.
    p.pop("noise", None)
    noise = params["presets"].get("grpo-tiny/h200", {}).get("noise")
    if noise:
        p["noise"] = noise
    params["presets"]["grpo-tiny/h200"] = p
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", default=os.path.join(ROOT, "data", "twin", "params.json"))
    ap.add_argument("--run", default=RUN)
    a = ap.parse_args()
    try:
        with open(a.params) as f:
            params = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("preset.py: cannot read %s: %s" % (a.params, e))
    if CARRY_FROM not in params.get("presets", {}) or "h200" not in params.get("gpus", {}):
        sys.exit("preset.py: %s lacks the %s preset or the h200 GPU" % (a.params, CARRY_FROM))
    m = build(params, a.run)
    with open(a.params + ".tmp", "w") as f:
        json.dump(params, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(a.params + ".tmp", a.params)
    print(json.dumps({k: v for k, v in m.items()}, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
