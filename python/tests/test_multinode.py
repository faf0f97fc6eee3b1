"""Several nodes over torch.distributed for real: gloo process groups across processes, each
process a "node" with its own eerld over its own stand-in NVML GPUs (eerld_nodes.py) at its
default socket ($EERL_SOCKET) and its GPUs visible by UUID (CUDA_VISIBLE_DEVICES), as a launcher
sets them on a real node. The pools come from the ranks' own GPUs (torch_gather_gpus), mapped to
NVML indices by UUID through each node's eerld. The Ray adapter's tests are in
test_multinode_ray.py."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import child_env, EERL_BIN, HANG_S
import eerld_nodes

import eerl
from eerl import multinode
from eerl.agent import Agent

EERLD = eerld_nodes.EERLD  # test_trl starts its own eerlds with it
NODES = 4


@pytest.fixture
def nodes(tmp_path):
    ns = eerld_nodes.start_nodes(tmp_path, NODES)
    try:
        yield ns
    finally:
        for n in ns:
            n.stop()


def start_ranks(script, nodes, tmp_path, world, per_node=1):
    """world processes, per_node of them on each node (its eerld, its GPUs visible; LOCAL_RANK
    as torchrun sets it)."""
    path = tmp_path / "rank.py"
    path.write_text(script)
    init = "file://" + str(tmp_path / "pg")
    return [subprocess.Popen([sys.executable, str(path), str(r), str(world), str(tmp_path), init],
                             env=child_env(LOCAL_RANK=r % per_node,
                                           **nodes[r // per_node].env()),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for r in range(world)]


def wait_ranks(procs, timeout=HANG_S):
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


RANK_SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    import torch.distributed as dist
    from eerl import multinode
    rank, world, out_dir, init = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    recs = multinode.torch_gather_gpus()   # every rank: where its GPUs are
    ad = multinode.TorchDistributedAdapter()
    if rank != 0:
        ad.serve()
        dist.destroy_process_group()
        sys.exit(0)
    runs = {
        "colocated": {"generation": recs, "training": recs},
        "disaggregated": {"generation": recs[:2], "training": recs[2:]},
        "drained": {"generation": recs[:2], "training": recs[2:]},
        "inflight": {"generation": recs[:2], "training": recs[2:]},
    }
    # the asynchronous modes' order: generation beside log-prob and training, then the refit
    # (in-flight: inside generation, which goes on after it)
    ASYNC = {"drained": [("b", "generation"), ("b", "logprob"), ("e", "logprob"),
                         ("b", "training"), ("e", "training"), ("e", "generation"),
                         ("b", "refit"), ("e", "refit")],
             "inflight": [("b", "generation"), ("b", "logprob"), ("e", "logprob"),
                          ("b", "training"), ("e", "training"), ("b", "refit"),
                          ("e", "refit"), ("e", "generation")]}
    result = {"records": recs}
    for mode, roles in runs.items():
        pools = ad.locate(roles)
        result[mode + "_pools"] = {k: {str(n): g for n, g in v.items()} for k, v in pools.items()}
        trace = os.path.join(out_dir, mode + ".jsonl")
        s = multinode.MultiNodeSession(ad, mode=mode, pools=pools, trace=trace)
        seen = []
        for u in range(20):
            rec = {"applied": s.applied_setting().to_dict()}
            if mode in ASYNC:
                for what, phase in ASYNC[mode]:
                    (s.phase_begin if what == "b" else s.phase_end)(phase)
                    time.sleep(0.004)
            else:
                for phase, dt in (("generation", 0.012), ("logprob", 0.003),
                                  ("training", 0.008), ("refit", 0.002)):
                    s.phase_begin(phase)
                    rec[phase] = {str(n): v for n, v in s.last_sm_mhz.items()}
                    time.sleep(dt)
                    s.phase_end(phase)
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


def test_torch_distributed_four_nodes(nodes, tmp_path):
    procs = start_ranks(RANK_SCRIPT, nodes, tmp_path, NODES)
    outs = wait_ranks(procs)
    for r, (p, (o, e)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, "rank %d: %s" % (r, e[-3000:])
    result = json.load(open(str(tmp_path / "result.json")))
    assert [r["gpus"] for r in result["records"]] == [n.uuids for n in nodes]
    assert [r["rank"] for r in result["records"]] == list(range(NODES))
    assert result["colocated_pools"] == {"generation": {str(k): [0, 1] for k in range(4)},
                                         "training": {str(k): [0, 1] for k in range(4)}}
    assert result["disaggregated_pools"] == {"generation": {"0": [0, 1], "1": [0, 1]},
                                             "training": {"2": [0, 1], "3": [0, 1]}}

    for mode in ("colocated", "disaggregated"):
        recs = result[mode]
        gen_nodes = ["0", "1", "2", "3"] if mode == "colocated" else ["0", "1"]
        train_nodes = ["0", "1", "2", "3"] if mode == "colocated" else ["2", "3"]
        switched = 0
        # 8 GPUs of 300 W on 4 nodes: the summed energy is the allocation's, not one node's
        # (a quarter of it). Over the whole run, since one update's end reading is the next
        # one's start, so how late a node reads against the driver's clock cancels but at the
        # two ends.
        per_gpu_w = sum(r["energy_j"] for r in recs) / sum(r["time_s"] for r in recs) / 8
        assert 200 < per_gpu_w < 400, (mode, per_gpu_w)
        prev = None
        for rec in recs:
            a, before = rec["applied"], prev
            prev = a
            if a["gen_mhz"] == 0 and a["train_mhz"] == 0:
                continue
            switched += 1
            for n in gen_nodes:  # every generation GPU of every node at the generation clock
                assert rec["generation"][n] == [a["gen_mhz"] or 1980] * 2, (mode, n, rec)
            for n in train_nodes:
                assert rec["training"][n] == [a["train_mhz"] or 1980] * 2, (mode, n, rec)
            # the training pool waits at the idle clock, which it took when its last phase
            # ended: in the update before, under that update's setting (as in eerl.Session)
            if mode == "disaggregated" and a["idle_mhz"] and before == a:
                for n in train_nodes:
                    assert rec["generation"][n] == [a["idle_mhz"]] * 2, (mode, n, rec)
        assert switched >= 3, "%s: the controller never left the governor: %s" % (mode, recs[-1])

        trace = str(tmp_path / (mode + ".jsonl"))
        # the one default strategy, as in eerl.Session and the C API
        assert json.loads(open(trace).readline())["strategy"] == "eerl"
        rp = subprocess.run([EERL_BIN, "replay", trace], capture_output=True, text=True,
                            timeout=HANG_S)
        assert rp.returncode == 0, rp.stderr
        assert "replayed 20 updates (0 refused)" in rp.stdout and "0 mismatches" in rp.stdout, \
            rp.stdout

    for mode in ("drained", "inflight"):  # the asynchronous modes through gloo too
        trace = str(tmp_path / (mode + ".jsonl"))
        ups = [json.loads(x) for x in open(trace) if '"update"' in x]
        ups = [x for x in ups if x["type"] == "update"]
        assert len(ups) == 20 and all(
            x["pools"]["generation"]["arrival_s"] > 0 and x["pools"]["training"]["arrival_s"] > 0
            and set(x["runtime"]["node_energy_j"]) == {"0", "1", "2", "3"} for x in ups), ups[-1]
        rp = subprocess.run([EERL_BIN, "replay", trace], capture_output=True, text=True,
                            timeout=HANG_S)
        assert rp.returncode == 0 and "replayed 20 updates" in rp.stdout and \
            "0 mismatches" in rp.stdout, rp.stdout + rp.stderr

    for n in nodes:  # everything back to the governor on every node
        assert n.locks() == [(None, None)] * 2


LEADERS_SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    import torch.distributed as dist
    from eerl import multinode
    rank, world, out_dir, init = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    local = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    recs = multinode.torch_gather_gpus(devices=[local])   # each rank: the one GPU it uses
    leaders = multinode.node_leaders()
    if local == 0:
        ad = multinode.TorchDistributedAdapter(group=leaders)
        if not ad.is_driver:
            ad.serve()
        else:
            pools = ad.locate({"generation": recs[:2], "training": recs[2:]})
            s = multinode.MultiNodeSession(ad, mode="disaggregated", pools=pools,
                                           trace=os.path.join(out_dir, "leaders.jsonl"))
            for u in range(3):
                for phase in ("generation", "training"):
                    with s.phase(phase):
                        time.sleep(0.005)
                s.update_end(generated_tokens=100, valid_tokens=90, longest_response=20)
            s.close()
            ad.close()
            json.dump({"records": recs, "pools": {k: {str(n): g for n, g in v.items()}
                                                  for k, v in pools.items()},
                       "names": [ad.describe(n) for n in ad.nodes]},
                      open(os.path.join(out_dir, "result.json"), "w"))
    dist.barrier()
    dist.destroy_process_group()
""")


def test_torch_distributed_two_ranks_per_node_through_node_leaders(nodes, tmp_path):
    """4 ranks on 2 nodes (LOCAL_RANK 0 and 1 on each), each rank using one of its node's two
    GPUs: node_leaders() makes the adapter's group of ranks 0 and 2, the pools are each rank's
    own GPU on its own node."""
    procs = start_ranks(LEADERS_SCRIPT, nodes, tmp_path, 4, per_node=2)
    outs = wait_ranks(procs)
    for r, (p, (o, e)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, "rank %d: %s" % (r, e[-3000:])
    res = json.load(open(str(tmp_path / "result.json")))
    assert [r["gpus"] for r in res["records"]] == [[nodes[0].uuids[0]], [nodes[0].uuids[1]],
                                                   [nodes[1].uuids[0]], [nodes[1].uuids[1]]]
    assert res["pools"] == {"generation": {"0": [0, 1]}, "training": {"1": [0, 1]}}
    assert res["names"] == ["node 0 (rank 0)", "node 1 (rank 2)"]
    for n in nodes[:2]:
        assert n.locks() == [(None, None)] * 2


KILL_SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    import datetime
    import torch.distributed as dist
    from eerl import multinode
    rank, world, out_dir, init = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    recs = multinode.torch_gather_gpus()
    ad = multinode.TorchDistributedAdapter(timeout_s=float(os.environ["NODE_TIMEOUT_S"]))
    if rank != 0:
        ad.serve()
        sys.exit(0)
    pools = ad.locate({"generation": recs, "training": recs})
    # the paper's strategy: its search sets the generation clock first, which the test waits for
    s = multinode.MultiNodeSession(ad, mode="colocated", pools=pools, strategy="paper",
                                   trace=os.path.join(out_dir, "killed.jsonl"))
    res = {}
    try:
        for u in range(60):
            for phase, dt in (("generation", 0.01), ("training", 0.006)):
                s.phase_begin(phase)
                a = s.applied_setting()
                if phase == "generation" and a["gen_mhz"] and "locked_at" not in res and all(
                        v == [a["gen_mhz"]] * 2 for v in s.last_sm_mhz.values()):
                    res["locked_at"] = u
                    open(os.path.join(out_dir, "locked"), "w").close()
                    deadline = time.time() + 300   # the test kills rank 2 now
                    while not os.path.exists(os.path.join(out_dir, "killed")):
                        assert time.time() < deadline, "rank 2 was not killed"
                        time.sleep(0.05)
                time.sleep(dt)
                s.phase_end(phase)
            s.update_end(generated_tokens=4000 + 50 * (u % 5), valid_tokens=3600 + 40 * (u % 5),
                         longest_response=300 + 10 * (u % 5), policy_version=u)
        res["error"] = None
    except multinode.NodeLost as e:
        res.update(error=str(e), node=e.node, type=type(e).__name__)
    s.close()
    ad.close()
    json.dump(res, open(os.path.join(out_dir, "result.json"), "w"))
    sys.exit(0)   # no destroy_process_group: rank 2 is gone
""")


@pytest.mark.parametrize("how", ["killed", "hung"])
def test_torch_distributed_node_lost_mid_run(nodes, tmp_path, monkeypatch, how):
    """Rank 2 (a node) is SIGKILLed, or stopped (SIGSTOP: a hung node), while its clocks are
    locked, inside a generation phase. Killed: its eerld resets its GPUs as the connection
    drops, and the driver's next boundary fails at once. Hung: its eerld resets them when its
    heartbeats stop (eerld's heartbeat timeout), and the driver's next boundary fails after the
    adapter's timeout. Either way the driver raises NodeLost naming node 2, releases nodes 0 and
    1, and the trace keeps the updates before the loss and ends with a line naming the lost
    node."""
    monkeypatch.setenv("NODE_TIMEOUT_S", "120" if how == "killed" else "3")
    procs = start_ranks(KILL_SCRIPT, nodes, tmp_path, 3)
    try:
        eerld_nodes.wait_for(lambda: os.path.exists(str(tmp_path / "locked")) or
                             any(p.poll() is not None for p in procs), 240,
                             "the driver locking the clocks")
        assert os.path.exists(str(tmp_path / "locked")), \
            [p.communicate()[1][-2000:] for p in procs if p.poll() is not None]
        locks = nodes[2].locks()
        assert all(lo is not None for lo, _ in locks), locks
        if how == "killed":
            procs[2].send_signal(signal.SIGKILL)
            procs[2].wait(timeout=HANG_S)
        else:
            procs[2].send_signal(signal.SIGSTOP)
        eerld_nodes.wait_for(lambda: nodes[2].locks() == [(None, None)] * 2, 60,
                             "node 2's eerld resetting its GPUs after its rank %s" % how)
        (tmp_path / "killed").write_text("")
        outs = wait_ranks(procs[:2], timeout=HANG_S)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert procs[0].returncode == 0, outs[0][1][-3000:]
    if how == "killed":  # the driver stops rank 1's serve()
        assert procs[1].returncode == 0, outs[1][1][-3000:]
    else:  # gloo closed every connection after the timeout: rank 1's serve() says so
        assert procs[1].returncode != 0 and "NodeLost: node 0 (rank 0): the driver is gone" \
            in outs[1][1], outs[1][1][-3000:]
    res = json.load(open(str(tmp_path / "result.json")))
    assert res["type"] == "NodeLost" and res["node"] == 2, res
    assert "node 2 (rank 2) was lost" in res["error"] and "session stopped" in res["error"], res
    if how == "hung":
        assert "no answer to 'step'" in res["error"], res
    for n in nodes[:3]:
        assert n.locks() == [(None, None)] * 2
    lines = [json.loads(x) for x in open(str(tmp_path / "killed.jsonl"))]
    ups = [x["update"] for x in lines if x["type"] == "update"]
    assert ups == list(range(1, res["locked_at"] + 1)), ups  # updates are numbered from 1
    last = lines[-1]
    assert last["type"] == "node_lost" and last["node"] == 2 and last["action"] == "stopped" \
        and last["open_phases"] == ["generation"], last
    if how == "killed":
        assert last["released"] == [0, 1], last
    else:  # node 1 released itself (above: its GPUs are back at the governor)
        assert last["released"] == [0] and "node 1 (rank 1)" in last["release_error"], last
    rp = subprocess.run([EERL_BIN, "replay", str(tmp_path / "killed.jsonl")],
                        capture_output=True, text=True, timeout=HANG_S)
    assert rp.returncode == 0 and "0 mismatches" in rp.stdout, rp.stdout + rp.stderr


class _FakeDist:
    """A one-rank group (the driver serves its own node), for the checks below that need no
    second process."""

    def get_rank(self, group=None):
        return 0

    def get_world_size(self, group=None):
        return 1


def test_node_errors_name_the_node(nodes):
    ad = multinode.TorchDistributedAdapter(socket=nodes[0].socket, dist=_FakeDist())
    with pytest.raises(multinode.NodeError) as e:
        ad.call("step", {0: {"gpus": [0, 7]}})
    assert e.value.node == 0 and "7" in str(e.value) and "node 0 (rank 0)" in str(e.value)
    with pytest.raises(ValueError, match="node 3 is not one of the adapter's nodes"):
        multinode.MultiNodeSession(ad, pools={"generation": {3: [0]}, "training": {3: [0]}})
    with pytest.raises(ValueError, match="both pools"):
        multinode.MultiNodeSession(ad, mode="disaggregated",
                                   pools={"generation": {0: [0]}, "training": {0: [0, 1]}})
    with pytest.raises(ValueError, match="mode 'async': use one of colocated, "
                                         "disaggregated, drained, inflight"):
        multinode.MultiNodeSession(ad, mode="async",
                                   pools={"generation": {0: [0]}, "training": {0: [1]}})
    # a worker placement that names a GPU no eerld serves, and an index the node does not have
    rec = {"node_id": None, "host": "elsewhere", "pid": 1, "rank": 5,
           "gpus": ["GPU-00000099-0000-0000-0000-000000000000"]}
    with pytest.raises(ValueError) as e:
        ad.locate({"generation": [rec], "training": [rec]})
    assert "rank 5" in str(e.value) and rec["gpus"][0] in str(e.value) and \
        "no eerld serves" in str(e.value) and nodes[0].uuids[1] in str(e.value)
    with pytest.raises(ValueError, match="names GPU 1 by index"):
        ad.locate({"generation": [dict(rec, gpus=[1])], "training": [dict(rec, gpus=[1])]})
    assert nodes[0].locks() == [(None, None)] * 2
    ad.close()


def test_local_gpus_reads_the_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aa,GPU-bb")
    assert multinode.local_gpus() == ["GPU-aa", "GPU-bb"]
    assert multinode.local_gpus(devices=[1]) == ["GPU-bb"]
    with pytest.raises(ValueError, match="sees 2 GPU"):
        multinode.local_gpus(devices=[2])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert multinode.local_gpus() == [3, 1]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with pytest.raises(RuntimeError, match="cannot tell which GPUs"):
        multinode.local_gpus()


def test_session_through_eerld_leases_switches_and_resets(nodes):
    from test_session import one_update
    sock = nodes[0].socket
    s = eerl.Session(pools={"generation": [0, 1], "training": [0, 1]}, eerld=sock)
    watch = Agent(sock, heartbeat=False)
    seen = None
    try:
        for u in range(25):
            one_update(s, u)
            a = s.applied_setting()
            # the default strategy (eerl's) probes one phase's clock at a time
            phase = "generation" if a["gen_mhz"] else "training" if a["train_mhz"] else None
            if phase:
                with s.phase(phase):
                    key = "gen_mhz" if phase == "generation" else "train_mhz"
                    seen = ([r[2] for r in watch.read([0, 1])], a[key])
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


def test_a_nodes_eerld_going_away_stops_the_session(nodes, tmp_path):
    """The node's eerld is stopped mid-run (SIGTERM: it resets its GPUs and exits): the next
    boundary fails on that node, the session stops with NodeError naming it, and the trace keeps
    its updates and ends with a node_error line."""
    from test_session import one_update
    n0 = nodes[0]
    ad = multinode.TorchDistributedAdapter(socket=n0.socket, dist=_FakeDist())
    trace = str(tmp_path / "eerld-gone.jsonl")
    s = multinode.MultiNodeSession(ad, strategy="paper",  # it sets the generation clock first
                                   pools={"generation": {0: [0, 1]}, "training": {0: [0, 1]}},
                                   trace=trace)
    try:
        for u in range(40):
            one_update(s, u)
            if s.applied_setting()["gen_mhz"]:
                break
        s.phase_begin("generation")
        assert all(lo is not None for lo, _ in n0.locks()), n0.locks()
        n0.stop()
        assert n0.locks() == [(None, None)] * 2  # eerld reset them on its way out
        with pytest.raises(multinode.NodeError) as e:
            s.phase_end("generation")
        assert e.value.node == 0 and "node 0 (rank 0) failed" in str(e.value) and \
            "session stopped" in str(e.value), str(e.value)
    finally:
        s.close()
        ad.close()
    lines = [json.loads(x) for x in open(trace)]
    assert [x["update"] for x in lines if x["type"] == "update"] == list(range(1, u + 2))
    last = lines[-1]
    assert last["type"] == "node_error" and last["node"] == 0 and \
        last["open_phases"] == ["generation"] and last["at"] == "the end of phase generation" \
        and last["released"] == [] and "node 0 (rank 0)" in last["release_error"], last


class _LocalAdapter(multinode._Adapter):
    """An adapter whose nodes are NodeServers in this process, each on its own eerld: for the
    checks that need several eerlds but no second process."""

    def __init__(self, sockets):
        self.servers = [multinode.NodeServer(s) for s in sockets]
        self.nodes = list(range(len(sockets)))

    def call(self, cmd, per_node):
        nodes = sorted(per_node)
        return self._unwrap(nodes, [self.servers[n].handle(cmd, per_node[n]) for n in nodes])


def test_nodes_that_disagree_are_refused(nodes, tmp_path):
    other = eerld_nodes.start_nodes(tmp_path / "other", 1, first=7,
                                    sm_clocks_mhz={"max": 1755, "min": 345, "step": 15})[0]
    try:
        ad = _LocalAdapter([nodes[0].socket, other.socket])
        pools = {"generation": {0: [0], 1: [0]}, "training": {0: [0], 1: [0]}}
        with pytest.raises(ValueError) as e:
            multinode.MultiNodeSession(ad, pools=pools)
        assert "GPU 0 of node 1 supports other clocks than GPU 0 of node 0" in str(e.value) and \
            "1755" in str(e.value) and "1980" in str(e.value), str(e.value)
        # two "nodes" reaching one eerld: each GPU would be served twice
        twice = _LocalAdapter([nodes[0].socket, nodes[0].socket])
        rec = {"node_id": None, "host": "h", "pid": 1, "rank": 0, "gpus": [nodes[0].uuids[0]]}
        with pytest.raises(ValueError, match="is served by the eerld of node 0 and of node 1"):
            twice.locate({"generation": [rec], "training": [rec]})
        assert nodes[0].locks() == [(None, None)] * 2 and other.locks() == [(None, None)] * 2
    finally:
        other.stop()
