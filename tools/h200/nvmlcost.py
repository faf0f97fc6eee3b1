#!/usr/bin/env python3
"""CPU and wall cost of single NVML queries on this machine (read-only queries only)."""
import resource
import time

import pynvml


def cost(name, fn, n=2000):
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print("%-40s wall %8.1f us  cpu %8.1f us  per call" % (name, 1e6 * (t1 - t0) / n, 1e6 * cpu / n))


pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
cost("nvmlDeviceGetTotalEnergyConsumption", lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h))
cost("nvmlDeviceGetPowerUsage", lambda: pynvml.nvmlDeviceGetPowerUsage(h))
cost("nvmlDeviceGetClockInfo(SM)", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
cost("nvmlDeviceGetCurrentClocksEventReasons",
     lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))
FI = getattr(pynvml, "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 83)
PI = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", 186)
try:
    v = pynvml.nvmlDeviceGetFieldValues(h, [FI])
    print("field value energy:", v[0].nvmlReturn, v[0].value.ullVal,
          "direct:", pynvml.nvmlDeviceGetTotalEnergyConsumption(h))
    cost("nvmlDeviceGetFieldValues(TOTAL_ENERGY)", lambda: pynvml.nvmlDeviceGetFieldValues(h, [FI]))
    cost("nvmlDeviceGetFieldValues(POWER_INSTANT)", lambda: pynvml.nvmlDeviceGetFieldValues(h, [PI]))
except Exception as e:  # noqa: BLE001 - report whatever the driver says
    print("nvmlDeviceGetFieldValues:", e)
cost("python loop overhead", lambda: None)
pynvml.nvmlShutdown()
