"""How the driver reaches the nodes, through the engine the framework already runs:

  RayAdapter               one Ray actor per node that holds a worker, placed on it with
                           NodeAffinitySchedulingStrategy, relaying to that node's eerld socket;
  TorchDistributedAdapter  one rank per node (e.g. each node's local rank 0) in a
                           torch.distributed group; the driver sends each node rank a command
                           point to point, the rank runs it against its eerld and replies.

Both carry the same few commands to a NodeServer on each node, all in flight together, and
name a node that fails (NodeError) or stops answering (NodeLost); the adapter's locate() finds
each worker's GPUs (discovery's records) in the eerld of the worker's node. It knows no
session: what the commands mean for the clocks and the energy is the session's.
"""

import os
import pickle
import time

from .. import _lib
from .._lib import EerlError
from ._discovery import _is_uuid, _norm_uuid, _worker_name
from ._server import NodeServer


class NodeError(EerlError):
    """A node failed a command. node: which one (the adapter's index); why: what failed;
    message (and str()): both, with the node's name (e.g. its Ray node id)."""

    def __init__(self, node, code, why, name=None):
        self.node, self.code, self.why = node, code, why
        self.message = "%s: %s" % (name or "node %s" % node, why)
        Exception.__init__(self, self.message)
        self.name = _lib.err_name(code) if code < 0 else "EERL_UNKNOWN"
        self.what, self.detail = "", ""


class NodeLost(NodeError):
    """A node stopped answering: its process, its raylet or the machine is gone (its eerld then
    resets its GPUs when the connection drops), or it did not answer within the timeout."""

    def __init__(self, node, why, name=None):
        NodeError.__init__(self, node, -10, why, name)  # EERL_EIO


class _Adapter:
    """What both adapters share: the node list, the names of nodes, and mapping the workers'
    GPUs to (node, NVML index) through each node's eerld."""

    nodes = ()
    lost = ()
    # what happens to a node this adapter gave up (NodeLost's message says it)
    lost_note = ("the lost node's eerld resets its GPUs as its connection drops or its "
                 "heartbeats stop")

    def describe(self, node):
        return "node %d" % node

    def _unwrap(self, nodes, results):
        out = {}
        for n, r in zip(nodes, results):
            if r[0] != "ok":
                raise NodeError(n, r[1], r[2], self.describe(n))
            out[n] = r[1]
        return out

    def locate(self, roles):
        """roles: {"generation": [record, ...], "training": [record, ...]} (records from
        where_am_i / ray_worker_gpus / ray_placement_group_gpus / torch_gather_gpus). Returns
        MultiNodeSession's pools, {role: {node: [NVML index, ...]}}, with every GPU found by UUID
        in the eerld of the node the worker is on. A GPU no eerld serves, a worker on a node
        the adapter does not reach, or a GPU served by another node's eerld than the worker's
        is a ValueError naming the worker and the GPU."""
        devs = self.call("devices", {n: {} for n in self.nodes})
        where = {}
        for n in self.nodes:
            for d in devs[n]["gpus"]:
                u = _norm_uuid(d["uuid"])
                if u in where and where[u][0] != n:
                    raise ValueError("GPU %s is served by the eerld of %s and of %s: each node's "
                                     "NodeServer must reach its own node's eerld (sockets=)"
                                     % (d["uuid"], self.describe(where[u][0]),
                                        self.describe(n)))
                where[u] = (n, d["gpu"])

        def served():
            return "; ".join("%s serves %s" % (self.describe(n),
                                               ", ".join(d["uuid"] for d in devs[n]["gpus"])
                                               or "no GPU") for n in self.nodes)

        pools, self.gpu_uuids = {}, {}
        for role, recs in roles.items():
            pool = {}
            for rec in recs:
                home = self._node_of(rec, devs)
                for g in rec["gpus"]:
                    if _is_uuid(g):
                        hit = where.get(_norm_uuid(g))
                        if hit is None:
                            raise ValueError("%s: %s uses GPU %s, which no eerld serves (%s)"
                                             % (role, _worker_name(rec), g, served()))
                        if home is not None and hit[0] != home:
                            raise ValueError(
                                "%s: %s runs on %s but its GPU %s is served by the eerld of %s"
                                % (role, _worker_name(rec), self.describe(home), g,
                                   self.describe(hit[0])))
                        n, idx = hit
                    else:
                        if home is None:
                            raise ValueError(
                                "%s: %s names GPU %s by index, and its node cannot be told "
                                "from its host (%d adapter nodes run on %s): give UUIDs "
                                "(CUDA_VISIBLE_DEVICES=GPU-...)"
                                % (role, _worker_name(rec), g,
                                   sum(devs[m]["host"] == rec.get("host") for m in self.nodes),
                                   rec.get("host")))
                        count = len(devs[home]["gpus"])
                        if not 0 <= int(g) < count:
                            raise ValueError("%s: %s uses GPU %s, but the eerld of %s serves "
                                             "GPUs 0-%d" % (role, _worker_name(rec), g,
                                                            self.describe(home), count - 1))
                        n, idx = home, int(g)
                    pool.setdefault(n, set()).add(idx)
                    self.gpu_uuids.setdefault(n, {})[idx] = devs[n]["gpus"][idx]["uuid"]
            if not pool:  # never every GPU of the nodes in their place: other jobs' maybe
                why = next((r.get("why") for r in recs if r.get("why")), None)
                raise ValueError("%s: the workers given hold no GPU%s: eerl controls only GPUs "
                                 "the job uses, so it takes none of the nodes'. Give each "
                                 "worker its GPUs (a CUDA device, or CUDA_VISIBLE_DEVICES="
                                 "GPU-...)" % (role, " (%s)" % why if why else ""))
            pools[role] = {n: sorted(v) for n, v in sorted(pool.items())}
        return pools

    def _take_posted(self):
        """Takes the answers of every posted command (each node's, so none is left to be read
        as the answer to a later command); raises the first failure."""
        posted, self._posted = list(getattr(self, "_posted", ())), []
        first = None
        for p in posted:
            try:
                self._finish(p)
            except NodeError as e:
                first = first or e
        if first is not None:
            raise first

    def _node_of(self, rec, devs):
        hosts = [n for n in self.nodes if devs[n]["host"] == rec.get("host")]
        return hosts[0] if len(hosts) == 1 else None


class TorchDistributedAdapter(_Adapter):
    """Driver and node ranks of a torch.distributed group. Node k is the k-th rank of the group
    (one rank per node: pass a group of the nodes' local rank 0, node_leaders() makes one). The
    driver is the group's rank driver (default 0) and serves its own node too. Every other node
    rank calls serve(), which returns when the driver closes the adapter.

    Commands go point to point (one send to each node named and one reply from each, all in
    flight together), so a node that dies is named: its reply fails (the connection closes, or
    after timeout_s) and call() raises NodeLost for it. After a timeout gloo closes every
    connection of the group, so the other node ranks' serve() then raises NodeLost (the driver
    is gone) and each releases its own GPUs. A node waiting in serve() waits up to the group's
    own timeout for the next command: make it longer than the longest phase."""

    def __init__(self, group=None, driver=0, socket=None, dist=None, timeout_s=120.0):
        if dist is None:
            import torch.distributed as dist
        import torch
        self.torch = torch
        self.dist = dist
        self.group = group
        self.driver = driver
        self.timeout_s = float(timeout_s)
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.nodes = list(range(self.world))
        self.lost = set()
        self._posted = []  # commands sent whose answers the next call takes
        self.server = NodeServer(socket)
        self.lost_note = (
            "the lost node's rank applies no clock change of a command that ran past the "
            "%g s wait, then releases its GPUs; its eerld resets them at once if the rank's "
            "connection drops, or at its heartbeat timeout if the rank hangs" % self.timeout_s)
        self._global = [dist.get_global_rank(group, r) if group is not None else r
                        for r in range(self.world)]

    def describe(self, node):
        return "node %d (rank %d)" % (node, self._global[node])

    @property
    def is_driver(self):
        return self.rank == self.driver

    def _send(self, obj, node):
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        hdr = self.torch.tensor([len(data)], dtype=self.torch.int64)
        body = self.torch.frombuffer(bytearray(data), dtype=self.torch.uint8)
        dst = self._global[node]
        return [self.dist.isend(hdr, dst, group=self.group),
                self.dist.isend(body, dst, group=self.group)]

    def _recv(self, node, timeout_s=None, deadline=None):
        """One message from node; its header waits until deadline (time.monotonic()) if given,
        else timeout_s; its body, sent right behind it, timeout_s."""
        src = self._global[node]
        hdr = self.torch.zeros(1, dtype=self.torch.int64)
        w = self.dist.irecv(hdr, src, group=self.group)
        self._wait(w, timeout_s if deadline is None else
                   max(0.001, deadline - time.monotonic()))
        body = self.torch.empty(int(hdr[0]), dtype=self.torch.uint8)
        w = self.dist.irecv(body, src, group=self.group)
        self._wait(w, timeout_s)
        return pickle.loads(body.numpy().tobytes())

    @staticmethod
    def _wait(work, timeout_s):
        if timeout_s is None:
            work.wait()
        else:
            import datetime
            work.wait(timeout=datetime.timedelta(seconds=timeout_s))

    def call(self, cmd, per_node):
        """Runs cmd on the nodes named in per_node ({node: kwargs}); returns {node: result}."""
        self._take_posted()
        return self._finish(self._start(cmd, per_node))

    def post(self, cmd, per_node):
        """Sends cmd to the nodes named in per_node without waiting for their answers: the next
        call() takes them first, and raises a node's failure there. A node runs the commands it
        is sent in order."""
        self._posted.append(self._start(cmd, per_node))

    def _start(self, cmd, per_node):
        if not self.is_driver:
            raise RuntimeError("only the driver rank calls nodes; node ranks call serve()")
        nodes = sorted(per_node)
        gone = [n for n in nodes if n in self.lost]
        if gone:
            raise NodeLost(gone[0], "lost earlier", self.describe(gone[0]))
        sends, lost, results = [], [], {}
        deadline = time.monotonic() + self.timeout_s  # one wait from the send, as the node counts
        for n in nodes:
            if n != self.driver:
                try:
                    sends += self._send((cmd, per_node[n], self.timeout_s), n)
                except Exception as e:  # a peer whose connection is closed
                    lost.append((n, e))
        if self.driver in per_node:
            results[self.driver] = self.server.handle(cmd, per_node[self.driver])
        return cmd, nodes, sends, lost, results, deadline

    def _finish(self, started):
        """The answers of a command _start sent: {node: result}, or NodeLost / NodeError."""
        cmd, nodes, sends, lost, results, deadline = started
        for n in nodes:
            if n == self.driver or any(n == m for m, _ in lost):
                continue
            try:
                results[n] = self._recv(n, self.timeout_s, deadline)
            except Exception as e:
                lost.append((n, e))
        for w in sends:
            try:
                w.wait()
            except Exception:
                pass  # its node is in lost already (its reply failed too)
        if lost:
            for n, _ in lost:
                self.lost.add(n)
            n, e = min(lost, key=lambda x: x[0])
            raise NodeLost(n, "no answer to %r: %s: %s" % (
                cmd, type(e).__name__, (str(e).splitlines() or [""])[0][:300]),
                self.describe(n))
        return self._unwrap(nodes, [results[n] for n in nodes])

    def serve(self):
        """Node ranks: run the driver's commands until it closes the adapter. If the driver
        goes away, this node's eerld connection is closed (its GPUs reset) and NodeLost is
        raised naming the driver."""
        if self.is_driver:
            raise RuntimeError("the driver rank does not serve")
        try:
            while True:
                try:
                    cmd, args, timeout_s = self._recv(self.driver)
                except Exception as e:
                    raise NodeLost(self.driver, "the driver is gone: %s: %s" % (
                        type(e).__name__, (str(e).splitlines() or [""])[0][:300]),
                        self.describe(self.driver))
                if cmd == "__stop__":
                    return
                for w in self._send(self.server.handle(cmd, args, timeout_s), self.driver):
                    w.wait()
        finally:
            self.server.cmd_close()

    def close(self):
        if self.is_driver:
            try:  # every answer taken, so no node rank waits on one before its stop
                self._take_posted()
            except NodeError:
                pass  # that node is in lost now: it is not sent the stop
            self.server.cmd_close()
            for n in self.nodes:
                if n != self.driver and n not in self.lost:
                    try:
                        for w in self._send(("__stop__", None, None), n):
                            w.wait()
                    except Exception:
                        self.lost.add(n)


def node_leaders(timeout=None):
    """Collective: a gloo group of each node's first rank (LOCAL_RANK 0, as torchrun sets it)
    for TorchDistributedAdapter(group=...), beside whatever backend the job's own group uses
    (the adapter sends CPU tensors). Every rank of the default group calls it (new_group is
    collective); ranks that are not leaders get the group too and must not use it. timeout: the
    group's (default: the default group's); a node rank waits up to it in serve()."""
    import torch.distributed as dist
    local = int(os.environ.get("LOCAL_RANK", "0"))
    ranks = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, local)
    leaders = [r for r, lr in enumerate(ranks) if lr == 0]
    kw = {"timeout": timeout} if timeout is not None else {}
    return dist.new_group(ranks=leaders, backend="gloo", **kw)


class RayAdapter(_Adapter):
    """One Ray actor per node (NodeAffinitySchedulingStrategy, soft=False), each relaying to its
    node's eerld. nodes: the Ray node ids to reach: the nodes the framework's workers are on
    (RayAdapter.for_workers(records) takes them from the workers' records), never "every GPU
    node". sockets: {node_id: eerld socket path} where a node's eerld is not at that node's
    default socket ($EERL_SOCKET, else /run/eerl/eerld.sock). A node whose actor dies (its
    raylet or machine gone) or does not answer within timeout_s raises NodeLost naming it
    (start_timeout_s bounds the actors' start, a new worker process on each node)."""

    def __init__(self, nodes, sockets=None, timeout_s=120.0, start_timeout_s=600.0, ray=None):
        if ray is None:
            import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        self.ray = ray
        self.timeout_s = float(timeout_s)
        nodes = list(nodes or ())
        if not nodes:
            raise ValueError("RayAdapter: no nodes given: pass the Ray node ids the job's "
                             "workers run on (RayAdapter.for_workers(ray_worker_gpus(actors)))")
        alive = {n["NodeID"]: n.get("Alive") for n in ray.nodes()}
        for nid in nodes:
            if nid not in alive:
                raise ValueError("RayAdapter: %r is not a node of this Ray cluster" % (nid,))
            if not alive[nid]:
                raise ValueError("RayAdapter: Ray node %s is dead" % nid)
        if len(set(nodes)) != len(nodes):
            raise ValueError("RayAdapter: a node is named twice in %r" % (nodes,))
        self.node_ids = nodes
        self.nodes = list(range(len(nodes)))
        self.lost = set()
        self._posted = []  # commands sent whose answers the next call takes
        self.lost_note = (
            "the lost node's NodeServer actor was killed, so no late command of it is applied "
            "and its eerld resets its GPUs and ends their lease as the connection closes")
        actor_cls = ray.remote(num_cpus=0, max_restarts=0)(NodeServer)
        sockets = sockets or {}
        unknown = sorted(set(sockets) - set(nodes))
        if unknown:
            raise ValueError("RayAdapter: sockets names %s, which is not in nodes" % unknown[0])
        self.actors = [
            actor_cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                node_id=nid, soft=False)).remote(sockets.get(nid))
            for nid in self.node_ids]
        try:  # a new actor is a new worker process: its start gets a bound of its own
            self.call("ping", {n: {} for n in self.nodes}, timeout_s=start_timeout_s)
        except BaseException:
            self.close()
            raise

    @classmethod
    def for_workers(cls, *record_lists, **kw):
        """An adapter over the nodes the given workers' records (ray_worker_gpus,
        ray_placement_group_gpus) are on, in order of first appearance."""
        nodes = []
        for recs in record_lists:
            for r in recs:
                if not r.get("node_id"):
                    raise ValueError("RayAdapter.for_workers: %s is not a Ray worker"
                                     % _worker_name(r))
                if r["node_id"] not in nodes:
                    nodes.append(r["node_id"])
        return cls(nodes, **kw)

    def describe(self, node):
        return "node %d (Ray node %s)" % (node, self.node_ids[node])

    def _node_of(self, rec, devs):
        nid = rec.get("node_id")
        if nid is None:
            return _Adapter._node_of(self, rec, devs)
        if nid not in self.node_ids:
            raise ValueError("%s is on Ray node %s, which this adapter does not reach (it "
                             "reaches %s)" % (_worker_name(rec), nid, ", ".join(self.node_ids)))
        return self.node_ids.index(nid)

    def call(self, cmd, per_node, timeout_s=None):
        """Runs cmd on the nodes named in per_node ({node: kwargs}); returns {node: result}."""
        self._take_posted()
        return self._finish(self._start(cmd, per_node, timeout_s))

    def post(self, cmd, per_node):
        """Sends cmd to the nodes named in per_node without waiting for their answers: the next
        call() takes them first, and raises a node's failure there. An actor runs the commands
        it is sent in order."""
        self._posted.append(self._start(cmd, per_node, None))

    def _start(self, cmd, per_node, timeout_s):
        timeout_s = self.timeout_s if timeout_s is None else float(timeout_s)
        nodes = sorted(per_node)
        gone = [n for n in nodes if n in self.lost]
        if gone:
            raise NodeLost(gone[0], "lost earlier", self.describe(gone[0]))
        refs = [self.actors[n].handle.remote(cmd, per_node[n], timeout_s) for n in nodes]
        return cmd, nodes, refs, timeout_s, time.monotonic() + timeout_s

    def _finish(self, started):
        """The answers of a command _start sent: {node: result}, or NodeLost / NodeError."""
        from ray.exceptions import GetTimeoutError, RayActorError
        cmd, nodes, refs, timeout_s, deadline = started
        results, lost = [], []
        for n, ref in zip(nodes, refs):
            try:
                results.append(self.ray.get(ref, timeout=max(0.0, deadline - time.monotonic())))
            except RayActorError as e:  # died, or unreachable (its raylet or host gone)
                lost.append((n, "its actor is gone (%s): %s" % (
                    type(e).__name__, (str(e).strip().splitlines() or [""])[-1][:300])))
                results.append(None)
            except GetTimeoutError:
                lost.append((n, "no answer to %r within %g s" % (cmd, timeout_s)))
                results.append(None)
        if lost:
            for n, _ in lost:
                self.lost.add(n)
                self._give_up(n)
            n, why = lost[0]
            raise NodeLost(n, why, self.describe(n))
        return self._unwrap(nodes, results)

    def _give_up(self, n):
        """A node given up: its actor is killed (a slow actor's heartbeats would keep its
        lease), so its eerld connection closes and eerld resets the node's GPUs and ends their
        lease; a command still running there ends with it."""
        try:
            self.ray.kill(self.actors[n], no_restart=True)
        except Exception:
            pass  # dead already, or its node gone: its connection is closed or will time out

    def close(self):
        try:
            live = [a for n, a in enumerate(self.actors) if n not in self.lost]
            self.ray.get([a.handle.remote("close", None) for a in live],
                         timeout=self.timeout_s)
        except Exception:
            pass  # the actors are killed next: each node's eerld resets what its actor held
        finally:
            for a in self.actors:
                try:
                    self.ray.kill(a)
                except Exception:
                    pass
            self.actors = []

