"""Several nodes: the torch.distributed adapter for real (4 processes on gloo as 4 nodes, each
with its own eerld on twin GPUs), one colocated and one disaggregated run; the Ray adapter's
placement and relaying against the Ray stand-in."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import BUILD, EERL_BIN, child_env

import eerl
from eerl import multinode
from eerl.agent import Agent

EERLD = os.path.join(BUILD, "eerld")
NODES = 4


@pytest.fixture
def daemons(tmp_path):
    """One eerld per "node", each serving 2 twin H100s on its own socket."""
    procs, socks = [], []
    try:
        for k in range(NODES):
            d = tmp_path / ("node%d" % k)
            d.mkdir()
            sock = str(d / "eerld.sock")
            (d / "policy.conf").write_text("")  # no rules: root (the tests) may lease
            p = subprocess.Popen([EERLD, "--socket", sock, "--state-dir", str(d),
                                  "--devices", "twin:h100x2", "--foreground",
                                  "--policy", str(d / "policy.conf")],
                                 stdout=subprocess.DEVNULL, stderr=open(str(d / "log"), "w"))
            procs.append(p)
            socks.append(sock)
        deadline = time.time() + 20
        while not all(os.path.exists(s) for s in socks):
            for p in procs:
                assert p.poll() is None, "eerld exited: %s" % open(str(tmp_path / "node0" / "log")).read()
            assert time.time() < deadline, "eerld sockets did not appear"
            time.sleep(0.05)
        yield socks
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


RANK_SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    import torch.distributed as dist
    from eerl import multinode
    rank, world = int(sys.argv[1]), int(sys.argv[2])
    socks, out_dir, init = json.loads(sys.argv[3]), sys.argv[4], sys.argv[5]
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    ad = multinode.TorchDistributedAdapter(socket=socks[rank])
    if rank != 0:
        ad.serve()
        dist.destroy_process_group()
        sys.exit(0)
    runs = {
        "colocated": {"generation": {n: [0, 1] for n in range(world)},
                      "training": {n: [0, 1] for n in range(world)}},
        "disaggregated": {"generation": {0: [0, 1], 1: [0, 1]},
                          "training": {2: [0, 1], 3: [0, 1]}},
    }
    result = {}
    for mode, pools in runs.items():
        trace = os.path.join(out_dir, mode + ".jsonl")
        s = multinode.MultiNodeSession(ad, mode=mode, pools=pools, trace=trace)
        seen = []
        for u in range(20):
            rec = {"applied": s.applied_setting()}
            for phase, dt in (("generation", 0.012), ("logprob", 0.003), ("training", 0.008),
                              ("refit", 0.002)):
                s.phase_begin(phase)
                rec[phase] = {str(n): v for n, v in s.last_sm_mhz.items()}
                time.sleep(dt)
                s.phase_end(phase)
                rec[phase + "_end"] = {str(n): v for n, v in s.last_sm_mhz.items()}
            m = s.update_end(generated_tokens=4000 + 50 * (u % 5), valid_tokens=3600 + 40 * (u % 5),
                             longest_response=300 + 10 * (u % 5), policy_version=u)
            rec["energy_j"], rec["time_s"] = m["eerl/update_energy_j"], m["eerl/update_time_s"]
            seen.append(rec)
        s.close()
        result[mode] = seen
    ad.close()
    json.dump(result, open(os.path.join(out_dir, "result.json"), "w"))
    dist.destroy_process_group()
""")


def test_torch_distributed_four_nodes(daemons, tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    init = "file://" + str(tmp_path / "pg")
    env = child_env()
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(NODES),
                               json.dumps(daemons), str(tmp_path), init],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(NODES)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=240))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for r, (p, (o, e)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, "rank %d: %s" % (r, e[-3000:])
    result = json.load(open(str(tmp_path / "result.json")))

    for mode, recs in result.items():
        gen_nodes = ["0", "1", "2", "3"] if mode == "colocated" else ["0", "1"]
        train_nodes = ["0", "1", "2", "3"] if mode == "colocated" else ["2", "3"]
        switched = 0
        for rec in recs:
            a = rec["applied"]
            # 8 GPUs on 4 nodes: per-GPU power from the summed energy is a real GPU's, not a
            # quarter of it (which is what one node's counters alone would give)
            per_gpu_w = rec["energy_j"] / rec["time_s"] / 8
            assert 60 < per_gpu_w < 800, (mode, per_gpu_w)
            if a["gen_mhz"] == 0 and a["train_mhz"] == 0:
                continue
            switched += 1
            for n in gen_nodes:  # every generation GPU of every node at the generation clock
                assert rec["generation"][n] == [a["gen_mhz"] or 1980] * 2, (mode, n, rec)
            for n in train_nodes:
                assert rec["training"][n] == [a["train_mhz"] or 1980] * 2, (mode, n, rec)
            if mode == "disaggregated" and a["idle_mhz"]:
                for n in train_nodes:  # the training pool waits at the idle clock
                    assert rec["generation"][n] == [a["idle_mhz"]] * 2, (mode, n, rec)
        assert switched >= 3, "%s: the controller never left the governor: %s" % (mode, recs[-1])

        trace = str(tmp_path / (mode + ".jsonl"))
        rp = subprocess.run([EERL_BIN, "replay", trace], capture_output=True, text=True,
                            timeout=60)
        assert rp.returncode == 0, rp.stderr
        assert "replayed 20 updates (0 refused)" in rp.stdout and "0 mismatches" in rp.stdout, \
            rp.stdout

    for sock in daemons:  # everything back to the governor on every node
        with Agent(sock, heartbeat=False) as a:
            assert [r[2] for r in a.read([0, 1])] == [1980, 1980]


class _FakeDist:
    """Two in-process "ranks" cannot run a collective; this checks the adapter's command
    plumbing on one rank (world size 1: the driver serves its own node)."""

    def __init__(self):
        self.boxes = []

    def get_rank(self, group=None):
        return 0

    def get_world_size(self, group=None):
        return 1

    def broadcast_object_list(self, box, src=0, group=None):
        self.boxes.append(list(box))

    def gather_object(self, obj, gathered, dst=0, group=None):
        gathered[0] = obj


def test_node_errors_name_the_node(daemons):
    ad = multinode.TorchDistributedAdapter(socket=daemons[0], dist=_FakeDist())
    with pytest.raises(multinode.NodeError) as e:
        ad.call("step", {0: {"gpus": [0, 7]}})
    assert e.value.node == 0 and "7" in str(e.value)
    with pytest.raises(ValueError, match="node 3 is not one of the adapter's nodes"):
        multinode.MultiNodeSession(ad, pools={"generation": {3: [0]}, "training": {3: [0]}})
    with pytest.raises(ValueError, match="both pools"):
        multinode.MultiNodeSession(ad, mode="disaggregated",
                                   pools={"generation": {0: [0]}, "training": {0: [0, 1]}})
    with pytest.raises(ValueError, match="inflight"):
        multinode.MultiNodeSession(ad, mode="inflight",
                                   pools={"generation": {0: [0]}, "training": {0: [1]}})
    ad.close()


def test_ray_adapter_places_one_actor_per_gpu_node_and_relays(daemons, tmp_path):
    import ray
    ray.set_nodes([
        {"NodeID": "aa01", "Alive": True, "Resources": {"GPU": 2.0, "CPU": 8.0}},
        {"NodeID": "head", "Alive": True, "Resources": {"CPU": 4.0}},  # no GPU: no actor
        {"NodeID": "bb02", "Alive": True, "Resources": {"GPU": 2.0}},
        {"NodeID": "dead", "Alive": False, "Resources": {"GPU": 2.0}},
    ])
    ad = multinode.RayAdapter(sockets={"aa01": daemons[0], "bb02": daemons[1]})
    assert ray.placements == [("aa01", False), ("bb02", False)]
    trace = str(tmp_path / "ray.jsonl")
    s = multinode.MultiNodeSession(ad, mode="disaggregated", pools={
        "generation": [(0, 0), (0, 1)], "training": [(1, 0), (1, 1)]}, trace=trace)
    for u in range(3):
        for phase in ("generation", "training"):
            with s.phase(phase):
                time.sleep(0.005)
        m = s.update_end(generated_tokens=100, valid_tokens=90, longest_response=20)
        assert m["eerl/nodes"] == 2 and m["eerl/update_energy_j"] > 0
    s.close()
    ad.close()
    assert len(ray.killed) == 2
    rp = subprocess.run([EERL_BIN, "replay", trace], capture_output=True, text=True, timeout=60)
    assert rp.returncode == 0 and "0 mismatches" in rp.stdout, rp.stderr
    ray.set_nodes([{"NodeID": "head", "Alive": True, "Resources": {"CPU": 4.0}}])
    with pytest.raises(RuntimeError, match="no alive Ray node with a GPU"):
        multinode.RayAdapter()


def test_session_through_eerld_leases_switches_and_resets(daemons):
    from test_session import one_update
    sock = daemons[0]
    s = eerl.Session(pools={"generation": [0, 1], "training": [0, 1]}, eerld=sock)
    watch = Agent(sock, heartbeat=False)
    seen = None
    try:
        for u in range(25):
            one_update(s, u)
            a = s.applied_setting()
            if a["gen_mhz"]:
                with s.phase("generation"):
                    seen = ([r[2] for r in watch.read([0, 1])], a["gen_mhz"])
                break
        assert seen is not None, "the controller never left the governor"
        assert seen[0] == [seen[1]] * 2  # eerld locked both GPUs for this session
        with pytest.raises(eerl.EerlError) as e:  # another client cannot lease them meanwhile
            watch.lease([0])
        assert e.value.name == "EERL_EBUSY"
    finally:
        s.close()
    assert [r[2] for r in watch.read([0, 1])] == [1980, 1980]
    watch.close()
