"""Several nodes through a real Ray cluster (ray.cluster_utils.Cluster, the Ray release pinned in
python/requirements/test.in): every Ray node has its own raylet, its own eerld over its own
stand-in NVML GPUs (eerld_nodes.py) and its own default socket ($EERL_SOCKET in the node's
environment, as /run/eerl/eerld.sock is on a real machine). The pools come from where the
framework's workers are (a placement group's bundles, the worker actors' own GPU ids), mapped to
NVML indices by UUID through each node's eerld. One cluster for the module (slow to start on a
small machine); every wait is bounded; nothing here depends on how fast the machine is."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import (EERL_BIN, HANG_S, HERE, LIB, PYROOT, RAY_NODE_IP,  # noqa: E402
                      RAY_SYSTEM_CONFIG)
import eerld_nodes

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402
from ray.util.placement_group import placement_group, remove_placement_group  # noqa: E402
from ray.util.scheduling_strategies import (  # noqa: E402
    NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy)

from eerl import multinode  # noqa: E402
import ray_workers  # noqa: E402

GPU_NODES = 2

# ray._private.node.Node waits a fixed 30 s for a new raylet to register with the GCS, polling
# ray._private.services.get_node; on a loaded 2-core machine a raylet once took longer and the
# node's start raised "timed out during startup" (its processes left running). The test cluster
# instead lets each lookup wait, with a generous bound: a guard against hanging, not a speed check.
_ray_get_node = ray._private.services.get_node


def _patient_get_node(*args, **kwargs):
    deadline = time.time() + 300
    while True:
        try:
            return _ray_get_node(*args, **kwargs)
        except RuntimeError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


ray._private.services.get_node = _patient_get_node


def node_env(node):
    env = node.env()
    env.update({"PYTHONPATH": os.pathsep.join([PYROOT, HERE]), "EERL_LIBRARY": LIB,
                "RAY_DEDUP_LOGS": "0"})
    return env


class RayCluster:
    def __init__(self, root):
        self.root = root
        self.nodes = []      # eerld_nodes.Node, one per GPU node
        self.ray_nodes = []  # the matching ray._private.node.Node
        # Ray's own waits for a node to register are 30 s; on a small shared machine that is
        # not always enough, so the nodes are waited for here, with a generous bound.
        # and its files in a folder of its own, never another Ray's on this machine
        self.temp = tempfile.mkdtemp(prefix="eerl-ray-")
        self.cluster = Cluster()
        self.head_socket = os.path.join(str(root), "no-eerld-here.sock")
        head = self.cluster.add_node(wait=False, num_cpus=1, num_gpus=0,
                                     node_ip_address=RAY_NODE_IP, include_dashboard=False, temp_dir=self.temp,
                                     _system_config=RAY_SYSTEM_CONFIG,
                                     env_vars={"PYTHONPATH": os.pathsep.join([PYROOT, HERE]),
                                               "EERL_LIBRARY": LIB,
                                               "EERL_SOCKET": self.head_socket})
        self.cluster.connect()
        self.wait_alive(head)
        self.head = head

    @staticmethod
    def wait_alive(rn):
        eerld_nodes.wait_for(lambda: any(n["NodeID"] == rn.node_id and n["Alive"]
                                         for n in ray.nodes()), 300,
                             "Ray node %s registering" % rn.node_id)

    def add_gpu_node(self):
        node = eerld_nodes.start_nodes(self.root, 1, first=len(self.nodes))[0]
        try:
            rn = self.cluster.add_node(wait=False, num_cpus=1, num_gpus=len(node.uuids),
                                       node_ip_address=RAY_NODE_IP,
                                       env_vars=node_env(node))
            self.wait_alive(rn)
        except BaseException:
            node.stop()
            raise
        self.nodes.append(node)
        self.ray_nodes.append(rn)
        return node, rn

    def close(self):
        try:
            ray.shutdown()
            self.cluster.shutdown()
        finally:
            for n in self.nodes:
                n.stop()
            shutil.rmtree(self.temp, ignore_errors=True)


@pytest.fixture(scope="module")
def rc(tmp_path_factory):
    c = RayCluster(tmp_path_factory.mktemp("ray"))
    try:
        for _ in range(GPU_NODES):
            c.add_gpu_node()
        yield c
    finally:
        c.close()


def run_updates(s, limit, until=None):
    """Runs updates; returns the update at which until(s) held inside a generation phase."""
    for u in range(limit):
        for phase, dt in (("generation", 0.01), ("logprob", 0.002), ("training", 0.006),
                          ("refit", 0.001)):
            s.phase_begin(phase)
            if phase == "generation" and until is not None and until(s):
                return u
            time.sleep(dt)
            s.phase_end(phase)
        s.update_end(generated_tokens=4000 + 50 * (u % 5), valid_tokens=3600 + 40 * (u % 5),
                     longest_response=300 + 10 * (u % 5), policy_version=u)
    return None


def replay(trace):
    rp = subprocess.run([EERL_BIN, "replay", trace], capture_output=True, text=True, timeout=HANG_S)
    assert rp.returncode == 0, rp.stderr
    assert "0 mismatches" in rp.stdout, rp.stdout
    return rp.stdout


def test_the_test_cluster_is_on_loopback_and_its_files_in_its_own_folder(rc):
    """Test servers listen on loopback only, and the Ray of the tests writes nothing in Ray's
    default folder (/tmp/ray): on a machine that never ran Ray that folder does not exist."""
    addrs = sorted({n["NodeManagerAddress"] for n in ray.nodes()})
    assert addrs == [RAY_NODE_IP], addrs
    gcs_host = rc.cluster.address.rsplit(":", 1)[0]
    assert gcs_host == RAY_NODE_IP, rc.cluster.address
    default = ray._common.utils.get_default_ray_temp_dir()
    assert default.startswith(os.environ["RAY_TMPDIR"] + os.sep), default
    assert rc.temp != default and os.path.isdir(rc.temp)


def test_pools_come_from_where_the_workers_are(rc, tmp_path):
    a, b = rc.nodes
    # generation: two 1-GPU bundles packed on one node; training: one bundle, which can only go
    # to the other node. The training node's second GPU holds no worker and must stay untouched.
    gen_pg = placement_group([{"GPU": 1}, {"GPU": 1}], strategy="STRICT_PACK")
    ray.get(gen_pg.ready(), timeout=HANG_S)
    train_pg = placement_group([{"GPU": 1}], strategy="STRICT_PACK")
    ray.get(train_pg.ready(), timeout=HANG_S)
    workers = []
    try:
        probed = multinode.ray_placement_group_gpus(gen_pg) + \
            multinode.ray_placement_group_gpus(train_pg)
        gen_w = [ray_workers.Worker.options(num_gpus=1, scheduling_strategy=
                                            PlacementGroupSchedulingStrategy(gen_pg, i)).remote()
                 for i in range(2)]
        train_w = [ray_workers.Worker.options(num_gpus=1, scheduling_strategy=
                                              PlacementGroupSchedulingStrategy(train_pg, 0)).remote()]
        workers = gen_w + train_w
        gen = multinode.ray_worker_gpus(gen_w)
        train = multinode.ray_worker_gpus(train_w)
        # the bundles' probes and the workers agree: one GPU a bundle
        assert sorted((r["node_id"], r["gpus"][0]) for r in probed) == \
            sorted((r["node_id"], r["gpus"][0]) for r in gen + train)
        gen_node = {r["node_id"] for r in gen}
        train_node = {r["node_id"] for r in train}
        assert len(gen_node) == 1 and len(train_node) == 1 and gen_node != train_node

        ad = multinode.RayAdapter.for_workers(gen, train)
        try:
            pools = ad.locate({"generation": gen, "training": train})
            by_id = {rn.node_id: n for rn, n in zip(rc.ray_nodes, rc.nodes)}
            gnode, tnode = by_id[gen_node.pop()], by_id[train_node.pop()]
            used = train[0]["gpus"][0]
            idle_gpu = [i for i, u in enumerate(tnode.uuids) if u != used][0]
            assert pools == {"generation": {0: [0, 1]},
                             "training": {1: [tnode.uuids.index(used)]}}, pools
            trace = str(tmp_path / "ray.jsonl")
            s = multinode.MultiNodeSession(ad, mode="disaggregated", pools=pools, trace=trace,
                                           strategy="paper")  # generation's clock first
            try:
                def locked(s):
                    a = s.applied_setting()
                    return a["gen_mhz"] and all(lo is not None for lo, _ in gnode.locks())
                u = run_updates(s, 40, until=locked)
                assert u is not None, "the generation clock was never locked: %s" % gnode.locks()
                a = s.applied_setting()
                assert gnode.locks() == [(a["gen_mhz"], a["gen_mhz"])] * 2
                assert tnode.locks()[idle_gpu] == (None, None)  # no worker there: untouched
                s.phase_end("generation")
                run_updates(s, 3)
                assert tnode.locks()[idle_gpu] == (None, None)
            finally:
                s.close()
        finally:
            ad.close()
        assert gnode.locks() == [(None, None)] * 2 and tnode.locks() == [(None, None)] * 2
        lines = [json.loads(x) for x in open(trace)]
        run = [x for x in lines if x["type"] == "run"][0]
        assert run["gpu_uuids"] == {"0": {"0": gnode.uuids[0], "1": gnode.uuids[1]},
                                    "1": {str(tnode.uuids.index(used)): used}}
        assert gen[0]["node_id"] in run["node_names"]["0"]
        replay(trace)
    finally:
        for w in workers:
            ray.kill(w)
        remove_placement_group(gen_pg)
        remove_placement_group(train_pg)


def test_bad_placement_is_refused_naming_the_gpu(rc, tmp_path):
    a, b = rc.nodes
    ra, rb = rc.ray_nodes
    with pytest.raises(ValueError, match="no nodes given"):
        multinode.RayAdapter([])
    with pytest.raises(ValueError, match="'f00d' is not a node of this Ray cluster"):
        multinode.RayAdapter(["f00d"])
    # a real worker whose GPU is one no eerld serves (its CUDA_VISIBLE_DEVICES names another
    # machine's GPU, as a wrong launcher setting would)
    stray = "GPU-00000099-0000-0000-0000-000000000000"
    w = ray_workers.Worker.options(
        num_gpus=1, scheduling_strategy=NodeAffinitySchedulingStrategy(ra.node_id, soft=False),
        runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": stray}}).remote()
    ok = ray_workers.Worker.options(
        num_gpus=1, scheduling_strategy=NodeAffinitySchedulingStrategy(rb.node_id,
                                                                       soft=False)).remote()
    try:
        recs = multinode.ray_worker_gpus([w])
        assert recs[0]["gpus"] == [stray] and recs[0]["node_id"] == ra.node_id
        ok_rec = multinode.ray_worker_gpus([ok])
        ad = multinode.RayAdapter.for_workers(recs)
        try:
            with pytest.raises(ValueError) as e:
                ad.locate({"generation": recs, "training": recs})
            msg = str(e.value)
            assert stray in msg and "no eerld serves" in msg and ra.node_id in msg, msg
            assert a.uuids[0] in msg  # and what the node's eerld does serve
            with pytest.raises(ValueError, match="which this adapter does not reach"):
                ad.locate({"generation": ok_rec, "training": ok_rec})
            idx = dict(recs[0], gpus=[7])  # an NVML index past the node's GPUs
            with pytest.raises(ValueError, match="serves GPUs 0-1"):
                ad.locate({"generation": [idx], "training": [idx]})
        finally:
            ad.close()
        assert a.locks() == [(None, None)] * 2  # nothing was leased
        # a node without an eerld (the head: nothing listens at its socket)
        head = rc.head.node_id
        ad = multinode.RayAdapter([head])
        try:
            with pytest.raises(multinode.NodeError) as e:
                ad.locate({"generation": recs, "training": recs})
            assert head in str(e.value) and "connecting to eerld at %s" % rc.head_socket in \
                str(e.value), str(e.value)
        finally:
            ad.close()
    finally:
        ray.kill(w)
        ray.kill(ok)


def run_async_updates(s, mode, limit, until=None):
    """Drained or in-flight updates in real time: the generation pool generates while the
    training pool computes log-probs and trains; then both refit (in-flight: inside generation,
    which goes on after it). Returns the update at which until(s) held, with generation and
    training open, or None."""
    for u in range(limit):
        s.phase_begin("generation")
        s.phase_begin("logprob")
        time.sleep(0.004)
        s.phase_end("logprob")
        s.phase_begin("training")
        if until is not None and until(s):
            return u
        time.sleep(0.012)
        s.phase_end("training")
        finish_async_update(s, mode, u)
    return None


def finish_async_update(s, mode, u):
    """The rest of an update of run_async_updates after its training ended."""
    if mode == "drained":
        time.sleep(0.006)
        s.phase_end("generation")
    s.phase_begin("refit")
    time.sleep(0.002)
    s.phase_end("refit")
    if mode == "inflight":
        time.sleep(0.006)
        s.phase_end("generation")
    s.update_end(generated_tokens=4000 + 50 * (u % 5), valid_tokens=3600 + 40 * (u % 5),
                 longest_response=300 + 10 * (u % 5), policy_version=max(0, u - 1))


@pytest.mark.parametrize("mode", ["colocated", "drained", "inflight"])
def test_killing_a_node_mid_run_stops_the_session_and_resets_its_clocks(rc, tmp_path, mode):
    """A new node joins, the job's workers are on it and on node a; its raylet is killed while
    its clocks are locked: its eerld resets them (the NodeServer's connection drops with the
    node's processes), the session stops with NodeLost naming the Ray node, node a is released,
    and the trace keeps every update before the loss and says which node was lost. Colocated,
    and the asynchronous modes with each pool on both nodes (GPU 0 of each node generates,
    GPU 1 trains)."""
    a = rc.nodes[0]
    c, rnc = rc.add_gpu_node()
    ws = [ray_workers.Worker.options(
        num_gpus=2, scheduling_strategy=NodeAffinitySchedulingStrategy(rn.node_id, soft=False))
        .remote() for rn in (rc.ray_nodes[0], rnc)]
    try:
        recs = multinode.ray_worker_gpus(ws)
        ad = multinode.RayAdapter.for_workers(recs, timeout_s=90)
        # several GPU nodes in the cluster; the job's workers are on two: only those are reached
        assert ad.node_ids == [rc.ray_nodes[0].node_id, rnc.node_id]
        pools = ad.locate({"generation": recs, "training": recs})
        assert pools["generation"] == {0: [0, 1], 1: [0, 1]}
        if mode != "colocated":
            pools = {"generation": {0: [0], 1: [0]}, "training": {0: [1], 1: [1]}}
        trace = str(tmp_path / "killed.jsonl")
        s = multinode.MultiNodeSession(ad, mode=mode, pools=pools, trace=trace,
                                       strategy="paper")  # generation's clock first
        try:
            def locked(s):
                if mode == "colocated":  # every GPU at the generation clock
                    return s.applied_setting()["gen_mhz"] and all(
                        lo is not None for n in (a, c) for lo, _ in n.locks())
                # a clock of the setting (generation, training or idle) locked on both nodes
                return any(s.applied_setting().values()) and all(
                    any(lo is not None for lo, _ in n.locks()) for n in (a, c))
            if mode == "colocated":
                u = run_updates(s, 40, until=locked)
            else:
                u = run_async_updates(s, mode, 80, until=locked)
            assert u is not None, "no clock was locked: %s %s" % (a.locks(), c.locks())
            for n in rc.nodes[1:-1]:  # the nodes without a worker
                assert n.locks() == [(None, None)] * 2
            rnc.kill_raylet()
            deadline = time.time() + 300  # the actor's death, or the adapter's timeout
            with pytest.raises(multinode.NodeLost) as e:
                if mode == "colocated":
                    s.phase_end("generation")
                    while time.time() < deadline:
                        run_updates(s, 1)
                else:
                    s.phase_end("training")
                    finish_async_update(s, mode, u)
                    while time.time() < deadline:
                        run_async_updates(s, mode, 1)
            msg = str(e.value)
            assert e.value.node == 1 and rnc.node_id in msg and "session stopped" in msg, msg
            assert "the trace keeps updates 1-" in msg, msg
            # its eerld resets the lost node's GPUs once the node's processes are gone
            eerld_nodes.wait_for(lambda: c.locks() == [(None, None)] * 2, 90,
                                 "the lost node's eerld resetting its GPUs")
            assert a.locks() == [(None, None)] * 2  # the surviving node was released
            with pytest.raises(multinode.EerlError, match="stopped"):
                s.phase_begin("generation")
        finally:
            s.close()
            ad.close()
        lines = [json.loads(x) for x in open(trace)]
        ups = [x for x in lines if x["type"] == "update"]
        assert [x["update"] for x in ups] == list(range(1, len(ups) + 1))  # numbered from 1
        assert len(ups) >= u
        if mode != "colocated":  # the asynchronous records, gathered over both nodes
            assert all(x["pools"]["generation"]["arrival_s"] > 0 and
                       x["pools"]["training"]["arrival_s"] > 0 for x in ups)
            assert all(set(x["runtime"]["node_energy_j"]) == {"0", "1"} for x in ups)
        last = lines[-1]
        assert last["type"] == "node_lost" and last["node"] == 1 and \
            rnc.node_id in last["name"] and last["action"] == "stopped" and \
            last["released"] == [0], last
        replay(trace)
    finally:
        for w in ws:
            try:
                ray.kill(w)
            except Exception:
                pass


def test_a_hung_node_is_lost_after_the_timeout(rc, tmp_path):
    """The NodeServer actor of one node stops answering (SIGSTOP: a hung process): its eerld
    resets its GPUs once its heartbeats stop; the session's next boundary raises NodeLost after
    the adapter's timeout; the other node is released through Ray as usual."""
    a, b = rc.nodes[0], rc.nodes[1]
    ws = [ray_workers.Worker.options(
        num_gpus=2, scheduling_strategy=NodeAffinitySchedulingStrategy(rn.node_id, soft=False))
        .remote() for rn in rc.ray_nodes[:2]]
    stopped = None
    try:
        recs = multinode.ray_worker_gpus(ws)
        ad = multinode.RayAdapter.for_workers(recs, timeout_s=10)
        servers = ad.call("ping", {n: {} for n in ad.nodes})
        pools = ad.locate({"generation": recs, "training": recs})
        trace = str(tmp_path / "hung.jsonl")
        # the paper's strategy tries a generation clock after a fixed number of governor
        # updates; eerl's waits until its calibration is steady, which these real-time updates
        # (sleeps) on a loaded machine may never be within the limit
        s = multinode.MultiNodeSession(ad, mode="colocated", pools=pools, trace=trace,
                                       strategy="paper")
        try:
            def locked(s):
                return s.applied_setting()["gen_mhz"] and all(
                    lo is not None for n in (a, b) for lo, _ in n.locks())
            assert run_updates(s, 40, until=locked) is not None, (a.locks(), b.locks())
            stopped = servers[1]["pid"]
            os.kill(stopped, signal.SIGSTOP)
            eerld_nodes.wait_for(lambda: b.locks() == [(None, None)] * 2, 90,
                                 "the hung node's eerld resetting its GPUs (heartbeat timeout)")
            with pytest.raises(multinode.NodeLost) as e:
                s.phase_end("generation")
            msg = str(e.value)
            assert e.value.node == 1 and rc.ray_nodes[1].node_id in msg and \
                "no answer to 'step' within 10 s" in msg, msg
            assert a.locks() == [(None, None)] * 2
        finally:
            s.close()
            ad.close()
        last = [json.loads(x) for x in open(trace)][-1]
        assert last["type"] == "node_lost" and last["released"] == [0], last
    finally:
        if stopped is not None:
            try:
                os.kill(stopped, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for w in ws:
            ray.kill(w)
