"""A node the driver gave up on is released, whatever it does later (issue 36, item 1): a slow
node, not a dead one, whose eerld answers only after the driver's wait. Its NodeServer applies
no clock change of the late command, and releases its GPUs; through Ray its actor is killed, so
its heartbeats no longer keep the lease. Each node's eerld is a real one over stand-in GPUs
(eerld_nodes.py); the Ray test runs a real Ray cluster as test_multinode_ray.py does. Every wait
is bounded by a generous guard; nothing here depends on how fast the machine is."""

import json
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import EERL_BIN, HANG_S
import eerld_nodes

from eerl import multinode

GOVERNOR = [(None, None)] * 2


def holders(node):
    """Who holds each GPU's lease, as the node's eerld says (`eerl status --json`)."""
    out = subprocess.run([EERL_BIN, "status", "--json", "--socket", node.socket],
                         capture_output=True, text=True, timeout=HANG_S)
    assert out.returncode == 0, out.stderr
    return [g["holder"] for g in json.loads(out.stdout)]


def held(proc):
    """SIGSTOP a node's eerld (a read held in it); returns the function that lets it go."""
    proc.send_signal(signal.SIGSTOP)
    return lambda: proc.send_signal(signal.SIGCONT)


@pytest.fixture
def node(tmp_path):
    n = eerld_nodes.start_nodes(tmp_path, 1)[0]
    try:
        yield n
    finally:
        n.proc.send_signal(signal.SIGCONT)
        n.stop()


@pytest.mark.parametrize("late", ["a clock after the read", "only the read"])
def test_a_command_past_the_drivers_wait_is_not_applied_and_the_node_released(node, late):
    """The node side of both adapters (a torch.distributed node rank runs this NodeServer):
    eerld holds a boundary's read past the wait the driver gave it; when the read comes back the
    clock the boundary sets after it (if any) is not applied, the GPUs are released (eerld
    resets them and no one holds them) and the answer says the node gave up; a later command is
    refused."""
    srv = multinode.NodeServer(node.socket)
    assert srv.handle("lease", {"gpus": [0, 1]}, timeout_s=HANG_S)[0] == "ok"
    r = srv.handle("step", {"gpus": [0, 1], "before": [[[0, 1], 1200]]}, timeout_s=HANG_S)
    assert r[0] == "ok" and node.locks() == [(1200, 1200)] * 2, (r, node.locks())
    go_on = held(node.proc)
    out = []
    step = {"gpus": [0, 1]}
    if late == "a clock after the read":
        step["after"] = [[[0, 1], 345]]
    t = threading.Thread(target=lambda: out.append(srv.handle("step", step, timeout_s=0.2)))
    try:
        t.start()
        # eerld is held until the step's wait is over: its read cannot come back before
        eerld_nodes.wait_for(lambda: srv._deadline is not None or out, HANG_S,
                             "the step starting")
        assert not out, out  # it cannot answer while eerld is held
        end = srv._deadline[0]
        eerld_nodes.wait_for(lambda: time.monotonic() > end + 0.1, HANG_S, "the wait ending")
    finally:
        go_on()
    t.join(HANG_S)
    assert not t.is_alive(), "the held step never came back"
    assert out[0][0] == "err" and "gave up: 'step' ran past the driver's 0.2 s wait" in \
        out[0][2], out
    assert node.locks() == GOVERNOR  # 345 was never applied; 1200 was reset
    assert holders(node) == [None, None]
    r = srv.handle("step", {"gpus": [0, 1], "before": [[[0, 1], 900]]}, timeout_s=HANG_S)
    assert r[0] == "err" and "gave up" in r[2] and node.locks() == GOVERNOR, r


def running(pid):
    """Whether process pid is still there (a zombie is not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two GPU nodes of a real Ray cluster, on loopback, built as test_multinode_ray.py's."""
    pytest.importorskip("ray")
    import test_multinode_ray
    c = test_multinode_ray.RayCluster(tmp_path_factory.mktemp("ray"))
    try:
        for _ in range(2):
            c.add_gpu_node()
        yield c
    finally:
        c.close()


def test_a_slow_ray_node_given_up_is_released(cluster, tmp_path):
    """A colocated session on two Ray nodes; inside a generation phase, with both nodes'
    clocks locked, node 1's eerld is held past the adapter's wait (1.5 s): the next boundary
    raises NodeLost naming the node and saying its actor was killed; once that eerld goes on,
    the node's GPUs are back at the governor and leased by no one, its NodeServer actor is
    gone, and node 0 was released. Without it the slow node's actor applied the late boundary
    and its heartbeats kept the lease until the adapter was closed."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    import ray_workers
    from test_multinode_ray import run_updates
    a, b = cluster.nodes
    ws = [ray_workers.Worker.options(
        num_gpus=2, scheduling_strategy=NodeAffinitySchedulingStrategy(rn.node_id, soft=False))
        .remote() for rn in cluster.ray_nodes]
    try:
        recs = multinode.ray_worker_gpus(ws)
        ad = multinode.RayAdapter.for_workers(recs, timeout_s=HANG_S)
        pid = ad.call("ping", {n: {} for n in ad.nodes})[1]["pid"]
        s = multinode.MultiNodeSession(ad, mode="colocated", strategy="paper",
                                       pools=ad.locate({"generation": recs, "training": recs}))
        try:
            def locked(s):
                return s.applied_setting()["gen_mhz"] and all(
                    lo is not None for n in (a, b) for lo, _ in n.locks())
            assert run_updates(s, 40, until=locked) is not None, (a.locks(), b.locks())
            # the wait shortened only now, so a loaded machine cannot lose a node earlier; and
            # eerld is held for less than its heartbeat timeout (5 s), so the hold alone
            # would not end the lease. Shorter than the node's own deadline on an eerld read
            # (half the heartbeat timeout, 2.5 s), which would report the node failed instead.
            ad.timeout_s = 1.5
            go_on = held(b.proc)
            try:
                with pytest.raises(multinode.NodeLost) as e:
                    s.phase_end("generation")
            finally:
                go_on()
            msg = str(e.value)
            assert e.value.node == 1 and cluster.ray_nodes[1].node_id in msg and \
                "no answer to 'step' within 1.5 s" in msg and "actor was killed" in msg, msg
            eerld_nodes.wait_for(lambda: b.locks() == GOVERNOR and holders(b) == [None, None],
                                 90, "the given-up node's GPUs reset and not leased")
            eerld_nodes.wait_for(lambda: not running(pid), 90, "its NodeServer actor gone")
            assert a.locks() == GOVERNOR and holders(a) == [None, None]
        finally:
            s.close()
            ad.close()
    finally:
        for w in ws:
            ray.kill(w)
