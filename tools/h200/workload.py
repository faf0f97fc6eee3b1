#!/usr/bin/env python3
"""A GPU workload with known phases, for checking eerl's meter on a real GPU (read-only).

Phases: idle, compute-bound (bf16 matrix products), memory-bound (in-place multiply over a large
bf16 tensor), idle. Each phase's start and end (time.monotonic(), seconds) are printed as one JSON
line on stdout, so a reader can line up energy with phases. Nothing here changes GPU settings.
"""
import argparse
import json
import sys
import time

import torch


OUT = sys.stdout


def phase(name, seconds, step):
    torch.cuda.synchronize()
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < seconds:
        step()
        n += 1
        if n % 8 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    t1 = time.monotonic()
    print(json.dumps({"phase": name, "t0": t0, "t1": t1, "steps": n}), file=OUT, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=15.0, help="seconds per busy phase")
    ap.add_argument("--idle", type=float, default=3.0, help="seconds of idle before and after")
    ap.add_argument("--phases", help="append the phase lines to this file instead of stdout")
    args = ap.parse_args()
    global OUT
    if args.phases:
        OUT = open(args.phases, "a")
    if not torch.cuda.is_available():
        sys.exit("workload.py: no CUDA device")
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16, generator=g)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16, generator=g)
    big = torch.randn(1 << 30, device=dev, dtype=torch.bfloat16, generator=g)  # 2 GiB
    torch.cuda.synchronize()
    phase("idle", args.idle, lambda: time.sleep(0.05))
    phase("compute", args.seconds, lambda: torch.mm(a, b))
    phase("memory", args.seconds, lambda: big.mul_(1.0000001))
    phase("idle", args.idle, lambda: time.sleep(0.05))


if __name__ == "__main__":
    main()
