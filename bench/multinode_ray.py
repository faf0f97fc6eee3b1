#!/usr/bin/env python3
"""Phase-boundary round trip through a real Ray cluster (docs/integrations/multinode.md).

Starts a local Ray cluster (ray.cluster_utils.Cluster: a head without GPUs, then GPU nodes added
one by one), each GPU node with its own eerld over its own stand-in NVML GPUs
(python/tests/eerld_nodes.py), and at each node count asked for runs a MultiNodeSession of each
mode asked for across every GPU node (colocated: every GPU in one pool; drained and in-flight:
GPU 0 of each node generates, the others train, so both pools span every node) and times each
phase boundary (phase_begin / phase_end: one command to every node, all in flight together,
which sets the pools changing clock and reads every GPU's energy counter, and the replies) from
the training loop's side. Also times a bare round trip to the nodes' actors ("ping": Ray alone,
no eerld), and the driver's serial part of it, which is what
grows with the node count when every node answers on its own CPUs: the driver process's CPU
time (all its threads) per round trip.

Then it fits T(n) = a + b*n to the boundary medians by least squares and prints it next to a
model of a real cluster: T(n) = T(1) + s*(n - 1), s the growth per node of the driver's CPU per
round trip measured here (the nodes answer in parallel on their own hosts, so only the driver's
fan-out grows with n); this machine's fit is an upper bound (every raylet, actor and eerld
shares its CPUs).

  build-venv/bin/python bench/multinode_ray.py [--nodes 1,2,3,4] [--gpus 2] [--boundaries 400]
                                               [--modes colocated,drained,inflight]

Needs a build (build/eerld, build/libeerl.so, build/fake_nvml) and the test virtual environment
(tools/run test makes it). Prints figures; it passes or fails nothing.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python", "tests"))
sys.path.insert(0, os.path.join(REPO, "python"))

import conftest  # noqa: E402  (sets EERL_LIBRARY / the stand-in NVML library from build/)
import eerld_nodes  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


def figures(name, xs):
    ms = [x * 1e3 for x in xs]
    return "%-22s n=%4d  median %7.2f ms  p90 %7.2f  p99 %7.2f  max %7.2f" % (
        name, len(ms), statistics.median(ms), pct(ms, 90), pct(ms, 99), max(ms))


def run_boundaries(s, mode, boundaries):
    """Updates of the mode until that many boundaries were timed; returns their times and the
    number of updates."""
    bt, u = [], 0

    def mark(fn, name):
        t = time.perf_counter()
        fn(name)
        bt.append(time.perf_counter() - t)

    while len(bt) < boundaries:
        if mode == "colocated":
            for phase in ("generation", "training"):
                mark(s.phase_begin, phase)
                mark(s.phase_end, phase)
        else:
            mark(s.phase_begin, "generation")
            mark(s.phase_begin, "training")
            mark(s.phase_end, "training")
            if mode == "drained":
                mark(s.phase_end, "generation")
            mark(s.phase_begin, "refit")
            mark(s.phase_end, "refit")
            if mode == "inflight":
                mark(s.phase_end, "generation")
        s.update_end(generated_tokens=4000, valid_tokens=3600, longest_response=300,
                     policy_version=max(0, u - 1))
        u += 1
    return bt, u


def measure(ray, multinode, ray_nodes, boundaries, root, modes):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    import ray_workers
    ws = [ray_workers.Worker.options(num_gpus=rn_gpus, scheduling_strategy=
                                     NodeAffinitySchedulingStrategy(rn.node_id, soft=False))
          .remote() for rn, rn_gpus in ray_nodes]
    try:
        recs = multinode.ray_worker_gpus(ws)
        ad = multinode.RayAdapter.for_workers(recs)
        try:
            pools = ad.locate({"generation": recs, "training": recs})
            ping = []
            cpu0 = time.process_time()  # the driver's CPU (all its threads): its serial part
            for _ in range(boundaries):
                t = time.perf_counter()
                ad.call("ping", {n: {} for n in ad.nodes})
                ping.append(time.perf_counter() - t)
            cpu = (time.process_time() - cpu0) / boundaries
            out = {}
            for mode in modes:
                if mode == "colocated":
                    p = pools
                else:
                    all_ = pools["generation"]
                    p = {"generation": {n: gs[:1] for n, gs in all_.items()},
                         "training": {n: gs[1:] for n, gs in all_.items()}}
                s = multinode.MultiNodeSession(ad, mode=mode, pools=p,
                                               trace=os.path.join(root, "bench-%s.jsonl" % mode))
                try:
                    bt, u = run_boundaries(s, mode, boundaries)
                    state = s.status()["state"]
                finally:
                    s.close()
                out[mode] = (bt, u, state)
        finally:
            ad.close()
    finally:
        for w in ws:
            ray.kill(w)
    return ping, cpu, out


def fit(xs, ys):
    """Least squares y = a + b x."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - b * mx, b


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="1,2,3,4", help="node counts to measure, ascending")
    ap.add_argument("--modes", default="colocated,drained,inflight",
                    help="MultiNodeSession modes to time at each node count")
    ap.add_argument("--gpus", type=int, default=2, help="stand-in GPUs per node")
    ap.add_argument("--boundaries", type=int, default=400, help="boundaries timed per count")
    a = ap.parse_args()
    counts = sorted({int(x) for x in a.nodes.split(",")})
    modes = [m for m in a.modes.split(",") if m]
    med, sub = {}, []
    import ray
    from ray.cluster_utils import Cluster
    from eerl import multinode
    # Ray waits a fixed 30 s for a new raylet to register; on a loaded machine that is not
    # always enough: each lookup may wait longer, as the tests' cluster does
    get_node = ray._private.services.get_node

    def patient_get_node(*args, **kwargs):
        deadline = time.time() + 300
        while True:
            try:
                return get_node(*args, **kwargs)
            except RuntimeError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
    ray._private.services.get_node = patient_get_node
    root = tempfile.mkdtemp(prefix="eerl-bench-ray-")
    env_base = {"PYTHONPATH": os.pathsep.join([os.path.join(REPO, "python"),
                                               os.path.join(REPO, "python", "tests")]),
                "EERL_LIBRARY": conftest.LIB}
    print("ray %s, %d stand-in GPUs per node, %d CPUs on this machine"
          % (ray.__version__, a.gpus, os.cpu_count()))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0,
                                                            "include_dashboard": False})
    cluster.connect()
    nodes, ray_nodes = [], []
    try:
        for want in counts:
            while len(nodes) < want:
                n = eerld_nodes.start_nodes(root, 1, n_gpus=a.gpus, first=len(nodes))[0]
                nodes.append(n)
                rn = cluster.add_node(num_cpus=1, num_gpus=a.gpus, env_vars=dict(env_base, **n.env()))
                ray_nodes.append((rn, a.gpus))
            ping, cpu, out = measure(ray, multinode, ray_nodes, a.boundaries, root, modes)
            print("%d node(s), %d GPUs:" % (want, want * a.gpus))
            print("  " + figures("ray round trip (ping)", ping) +
                  "  driver CPU %.2f ms a round trip" % (cpu * 1e3))
            for mode in modes:
                bt, updates, state = out[mode]
                print("  " + figures("boundary, %s" % mode, bt) +
                      "  (%d updates, controller %s)" % (updates, state))
                med.setdefault(mode, []).append(statistics.median(bt) * 1e3)
            sub.append(cpu * 1e3)
            sys.stdout.flush()
        print("growth with node count (boundary medians, ms):")
        for mode in modes:
            ys = med[mode]
            b0, b1 = fit(counts, ys)
            steps = ", ".join("%d->%d: %+.2f" % (counts[i], counts[i + 1], ys[i + 1] - ys[i])
                              for i in range(len(ys) - 1))
            print("  %-10s %s   fit here: %.2f + %.2f ms/node" % (mode, steps, b0, b1))
        s = fit(counts, sub)[1] if len(counts) > 1 else sub[0]
        t1 = statistics.median([med[m][0] for m in modes])
        print("driver CPU a round trip (ms): %s" % ", ".join(
            "%d nodes %.2f" % (n, c) for n, c in zip(counts, sub)))
        print("model of a real cluster: T(n) = T(1) + s (n - 1), T(1) = %.2f ms (median over "
              "modes at 1 node), s = %.3f ms/node (the driver's CPU per round trip, its growth "
              "per node: the nodes answer in parallel on their own hosts)" % (t1, s))
        print("  " + "  ".join("%d nodes: %.1f ms" % (n, t1 + s * (n - 1))
                               for n in (8, 16, 32, 64, 128)) +
              "  (20 ms at %d nodes)" % (1 + int((20 - t1) / s) if s > 0 else -1))
        worst = max(b1 for b1 in (fit(counts, med[m])[1] for m in modes))
        print("  this machine's fit, an upper bound: %s"
              % "  ".join("%d nodes: %.1f ms" % (n, max(fit(counts, med[m])[0] +
                                                          fit(counts, med[m])[1] * n
                                                          for m in modes))
                          for n in (8, 16, 32)) + " (%.2f ms/node)" % worst)
    finally:
        ray.shutdown()
        cluster.shutdown()
        for n in nodes:
            n.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
