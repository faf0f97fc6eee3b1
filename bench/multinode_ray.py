#!/usr/bin/env python3
"""Phase-boundary round trip through a real Ray cluster (docs/integrations/multinode.md).

Starts a local Ray cluster (ray.cluster_utils.Cluster: a head without GPUs, then GPU nodes added
one by one), each GPU node with its own eerld over its own stand-in NVML GPUs
(python/tests/eerld_nodes.py), and at each node count asked for runs a colocated
MultiNodeSession across every GPU node and times each phase boundary (phase_begin / phase_end:
one command to every node, which switches its pool and reads its GPUs' energy counters, and the
replies) from the training loop's side. Also times a bare round trip to the nodes' actors
("ping": Ray alone, no eerld) to show what is Ray's.

  build-venv/bin/python bench/multinode_ray.py [--nodes 1,2,4] [--gpus 2] [--boundaries 400]

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


def measure(ray, multinode, ray_nodes, boundaries, root):
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
            for _ in range(boundaries):
                t = time.perf_counter()
                ad.call("ping", {n: {} for n in ad.nodes})
                ping.append(time.perf_counter() - t)
            s = multinode.MultiNodeSession(ad, mode="colocated", pools=pools,
                                           trace=os.path.join(root, "bench.jsonl"))
            bt, u = [], 0
            try:
                while len(bt) < boundaries:
                    for phase in ("generation", "training"):
                        t = time.perf_counter()
                        s.phase_begin(phase)
                        bt.append(time.perf_counter() - t)
                        t = time.perf_counter()
                        s.phase_end(phase)
                        bt.append(time.perf_counter() - t)
                    s.update_end(generated_tokens=4000, valid_tokens=3600, longest_response=300,
                                 policy_version=u)
                    u += 1
                state = s.status()
            finally:
                s.close()
        finally:
            ad.close()
    finally:
        for w in ws:
            ray.kill(w)
    return ping, bt, u, state


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="1,2,4", help="node counts to measure, ascending")
    ap.add_argument("--gpus", type=int, default=2, help="stand-in GPUs per node")
    ap.add_argument("--boundaries", type=int, default=400, help="boundaries timed per count")
    a = ap.parse_args()
    counts = sorted({int(x) for x in a.nodes.split(",")})
    import ray
    from ray.cluster_utils import Cluster
    from eerl import multinode
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
            ping, bt, updates, state = measure(ray, multinode, ray_nodes, a.boundaries, root)
            print("%d node(s), %d GPUs, %d updates (controller %s):" % (
                want, want * a.gpus, updates, state["state"]))
            print("  " + figures("ray round trip (ping)", ping))
            print("  " + figures("phase boundary", bt))
            sys.stdout.flush()
    finally:
        ray.shutdown()
        cluster.shutdown()
        for n in nodes:
            n.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
