#!/usr/bin/env python3
"""Summarize a validate.sh output folder: eerl meter vs the independent NVML reading.

For each sampling interval: eerl's energy over its window, the independent reader's energy over
the window it bracketed, and (when eerl reports its window's monotonic start and end) the
reader's polled series cut to exactly eerl's window; the difference in percent; eerl's own CPU
time per second of metering; and each workload phase's mean power from the reader's series.
"""
import json
import os
import sys


def interp(series, t):
    """Cumulative energy (mJ) at monotonic time t from [(t, mJ), ...] by linear interpolation."""
    for (ta, ea), (tb, eb) in zip(series, series[1:]):
        if ta <= t <= tb:
            return ea + (eb - ea) * ((t - ta) / (tb - ta) if tb > ta else 0.0)
    raise ValueError("time %.3f outside the series" % t)


def main(out):
    rows = []
    for name in sorted(os.listdir(out)):
        if not (name.startswith("meter-") and name.endswith(".json")):
            continue
        ms = name[len("meter-"):-len(".json")]
        meter = json.load(open(os.path.join(out, name)))
        ref = json.load(open(os.path.join(out, "ref-%s.json" % ms)))
        series = [(r[0], r[1]) for r in ref["series"]]
        e_meter = meter["total"]["energy_j"]
        e_ref = sum(ref["energy_j"])
        print("interval %s ms: eerl %.1f J over %.3f s; reader (bracketing) %.1f J over %.3f s: "
              "%+.3f%%" % (ms, e_meter, meter["duration_s"], e_ref, ref["t1"] - ref["t0"],
                            100.0 * (e_meter - e_ref) / e_ref))
        w = meter.get("window_monotonic_s")
        if w:
            e_cut = (interp(series, w[1]) - interp(series, w[0])) / 1000.0
            print("  reader cut to eerl's window %.3f-%.3f: %.1f J: eerl differs by %+.3f%%"
                  % (w[0], w[1], e_cut, 100.0 * (e_meter - e_cut) / e_cut))
        cpu = meter.get("meter_cpu_s")
        if cpu is not None:
            print("  eerl meter CPU: %.4f s over %.1f s = %.4f%% of one core (%d samples)"
                  % (cpu, meter["duration_s"], 100.0 * cpu / meter["duration_s"],
                     meter.get("samples", 0)))
        ph = os.path.join(out, "phases-%s.jsonl" % ms)
        if os.path.exists(ph):
            for line in open(ph):
                p = json.loads(line)
                try:
                    e = (interp(series, p["t1"]) - interp(series, p["t0"])) / 1000.0
                except ValueError:
                    continue
                dt = p["t1"] - p["t0"]
                st = [r for r in ref.get("state", []) if p["t0"] <= r[0] <= p["t1"]]
                clk = sorted(r[1] for r in st)
                pw = sorted(r[2] for r in st)
                thr = 0
                for r in st:
                    thr |= r[3]
                print("  phase %-8s %6.2f s  %8.1f J  %6.1f W counter  %6.1f W median usage  "
                      "SM median %s MHz  throttle OR 0x%x"
                      % (p["phase"], dt, e, e / dt, pw[len(pw) // 2] / 1000.0 if pw else 0,
                         clk[len(clk) // 2] if clk else "?", thr))
        rows.append(ms)
    if not rows:
        print("no meter-*.json in", out)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
