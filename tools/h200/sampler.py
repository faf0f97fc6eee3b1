#!/usr/bin/env python3
"""Samples what the GPU governor does, through NVML queries only (read-only), into a CSV file.

Each row: CLOCK_MONOTONIC time, GPU index, averaged and instantaneous power (W), SM and memory
clocks (MHz), the clock event (throttle) reasons bit mask, GPU and memory utilization (%), and
temperature (C). Nothing on the card is changed. Runs until --seconds have passed, the file named
by --stop-file exists, or SIGTERM/SIGINT.

    python3 tools/h200/sampler.py --gpus 0,1 --interval-ms 50 --out samples.csv --seconds 600
"""
import argparse
import os
import signal
import sys
import time

import pynvml

FI_POWER_INSTANT = 186  # NVML_FI_DEV_POWER_INSTANT


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", default="0")
    ap.add_argument("--interval-ms", type=float, default=50.0)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--stop-file", default=None)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if not a.interval_ms > 0:
        sys.exit("sampler.py: --interval-ms must be positive, not %s" % a.interval_ms)
    pynvml.nvmlInit()
    gpus = [int(g) for g in a.gpus.split(",")]
    hs = [pynvml.nvmlDeviceGetHandleByIndex(g) for g in gpus]
    reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))

    def inst(h):
        try:
            v = pynvml.nvmlDeviceGetFieldValues(h, [FI_POWER_INSTANT])[0]
            if v.nvmlReturn != 0:
                return ""
            return "%.3f" % (v.value.uiVal / 1000.0)
        except pynvml.NVMLError:
            return ""

    end = time.monotonic() + a.seconds
    step = a.interval_ms / 1000.0
    nxt = time.monotonic()
    with open(a.out, "w") as f:
        f.write("mono,gpu,power_w,power_inst_w,sm_mhz,mem_mhz,reasons,util_gpu,util_mem,temp_c\n")
        while not stop and time.monotonic() < end:
            if a.stop_file and os.path.exists(a.stop_file):
                break
            for g, h in zip(gpus, hs):
                t = time.monotonic()
                p = pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0
                sm = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
                mem = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)
                r = reasons(h)
                u = pynvml.nvmlDeviceGetUtilizationRates(h)
                temp = pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
                f.write("%.6f,%d,%.3f,%s,%d,%d,%d,%d,%d,%d\n"
                        % (t, g, p, inst(h), sm, mem, r, u.gpu, u.memory, temp))
            nxt += step
            delay = nxt - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                nxt = time.monotonic()
    pynvml.nvmlShutdown()


if __name__ == "__main__":
    main()
