#!/usr/bin/env python3
"""An independent reading of the NVML energy counter around a command (read-only).

Reads nvmlDeviceGetTotalEnergyConsumption for the chosen GPUs right before starting CMD and
right after it exits, and polls it every --poll-ms in between so the window's energy can also be
cut at any time. Prints one JSON object on stdout (after CMD's own output, which passes through).
Only NVML query functions are called: nothing on the card is changed.
"""
import argparse
import json
import subprocess
import sys
import threading
import time

import pynvml


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="0")
    ap.add_argument("--poll-ms", type=float, default=20.0)
    ap.add_argument("--out", required=True, help="file for the JSON result")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        sys.exit("refmeter.py: no command")
    pynvml.nvmlInit()
    gpus = [int(x) for x in a.gpus.split(",")]
    hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in gpus]

    def read():
        return [pynvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in hs]

    reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def state():
        # SM clock (MHz), power (mW) and throttle reasons of the first GPU: read-only queries.
        h = hs[0]
        return [pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                pynvml.nvmlDeviceGetPowerUsage(h), reasons(h)]

    series = []
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            series.append((time.monotonic(), read(), state()))
            time.sleep(a.poll_ms / 1000.0)

    th = threading.Thread(target=poll, daemon=True)
    e0, t0 = read(), time.monotonic()
    th.start()
    rc = subprocess.call(cmd)
    t1 = time.monotonic()
    e1 = read()
    stop.set()
    th.join()
    res = {
        "gpus": gpus, "t0": t0, "t1": t1, "energy_mj_start": e0, "energy_mj_end": e1,
        "energy_j": [(y - x) / 1000.0 for x, y in zip(e0, e1)],
        "series": [[t] + e for t, e, _ in series],
        "state": [[t] + st for t, _, st in series], "state_columns": ["t", "sm_mhz", "power_mw",
                                                                      "throttle_reasons"],
        "rc": rc,
    }
    with open(a.out, "w") as f:
        json.dump(res, f)
    pynvml.nvmlShutdown()
    sys.exit(rc)


if __name__ == "__main__":
    main()
