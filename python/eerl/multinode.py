"""Many nodes through the framework's own engine (docs/integrations/multinode.md).

The controller runs once, in the driver (MultiNodeSession). Every node runs eerld, which owns that
node's clocks. The driver reaches the nodes through an adapter over the engine the framework
already runs, never a network protocol of eerl's own:

  RayAdapter               one Ray actor per node that holds a worker, placed on it with
                           NodeAffinitySchedulingStrategy, relaying to that node's eerld socket;
  TorchDistributedAdapter  one rank per node (e.g. each node's local rank 0) in a
                           torch.distributed group; the driver sends each node rank a command
                           point to point, the rank runs it against its eerld and replies.

The pools come from where the framework's workers are: each worker's record (where_am_i, asked
of Ray actors by ray_worker_gpus, of placement-group bundles by ray_placement_group_gpus, of
every rank by torch_gather_gpus) names its node and its GPUs by UUID, and the adapter's locate()
finds each GPU's NVML index in the eerld of the worker's node.

Both adapters carry the same few commands to a NodeServer on each node (devices, hello, lease,
a phase boundary's clock settings and energy read, close). At every phase boundary the driver
sends one command to all nodes, all in flight together, that sets the clocks of the pools that
change and reads every GPU's energy counter in the same round trip, so every figure is a sum
over nodes of counter differences between boundaries.

MultiNodeSession has the Session interface (phase_begin/phase_end/phase(), update_end, metrics,
status, close) in all four modes; it keeps the books as eerl.Session's runtime does
(src/runtime/session.c: per-pool intervals, idle clock, arrivals, carry-over, policy age),
builds the observation itself from the boundary readings, feeds the C controller (eerl_ctl_*),
and writes a trace in eerl's trace format (docs/trace-format.md) that `eerl replay` checks. At
its start each node's eerld release, GPUs, models and clock lists are checked. Closing it (or
collecting it, or the process exiting) releases every lease; eerld resets those GPUs. A node
lost or failing mid-run stops it: the others are released, the trace ends with a line naming
the node, and NodeLost / NodeError is raised.
"""

import atexit
import ctypes as C
import json
import math
import os
import pickle
import re
import socket as _socket
import sys
import time
import weakref

from . import _lib
from . import _types as T
from ._lib import EerlError

# ---- the node side -------------------------------------------------------------------------------


class _GaveUp(EerlError):
    """A command ran past the time the driver waits for it (see NodeServer.handle)."""


class NodeServer:
    """Runs on one node: executes the driver's commands against that node's eerld.

    A command that runs past the driver's wait (handle's timeout_s: eerld held, the node slow)
    has been given up by the driver, which raised NodeLost for this node. So this server then
    changes no clock (the rest of that command is skipped), releases every GPU it leased and
    closes its eerld connection (eerld resets them), answers why, and refuses every later
    command; a late command that changed nothing gives the node up as well. The wait is counted
    from when the command reached this node, so the node never gives up before the driver."""

    def __init__(self, socket=None):
        self.socket = socket
        self.agent = None
        self.pools = {}
        self.gave_up = None   # why this server gave up, once it has
        self._deadline = None

    def _agent(self):
        if self.gave_up is not None:
            raise _GaveUp(-12, self.gave_up)  # EERL_ETIMEDOUT
        if self.agent is None:
            from .agent import Agent
            self.agent = Agent(self.socket, name="eerl-multinode")
        return self.agent

    def _in_time(self):
        """Raises _GaveUp once the driver stopped waiting for this command."""
        if self._deadline is not None and time.monotonic() > self._deadline[0]:
            self.gave_up = ("gave up: %r ran past the driver's %g s wait for it, so this node "
                            "was released and applies nothing more" % self._deadline[1:])
            raise _GaveUp(-12, self.gave_up)  # EERL_ETIMEDOUT

    def _change(self):
        """The agent, for a call that changes a clock, a lease or a pool."""
        self._in_time()
        return self._agent()

    def handle(self, cmd, args, timeout_s=None):
        """Returns ("ok", result) or ("err", code, message): errors travel back as values so a
        failing node never leaves the collective half-done. timeout_s: how long the driver waits
        for the answer (None: no bound); past it, see the class."""
        if timeout_s is not None and cmd != "close":
            self._deadline = (time.monotonic() + float(timeout_s), cmd, float(timeout_s))
        try:
            r = getattr(self, "cmd_" + cmd)(**(args or {}))
            self._in_time()  # done, but late: the driver gave this node up all the same
            return ("ok", r)
        except _GaveUp as e:
            try:
                self.cmd_close()   # eerld resets every GPU this connection leased
            except EerlError:
                pass  # closed all the same: eerld resets them as the connection drops
            return ("err", e.code, str(e))
        except EerlError as e:
            return ("err", e.code, str(e))
        except Exception as e:  # a bug or a bad argument on the node: still report it
            return ("err", -1, "%s: %s" % (type(e).__name__, e))
        finally:
            self._deadline = None

    def cmd_ping(self):
        return {"host": _socket.gethostname(), "pid": os.getpid()}

    def cmd_devices(self):
        """Every GPU this node's eerld serves (NVML index, UUID, name), and where it listens."""
        a = self._agent()
        return {"host": _socket.gethostname(), "socket": a.socket, "gpus": a.devices()}

    def cmd_hello(self, gpus, describe=False):
        """This node's eerld (its hello: GPU count, server version) and, for the GPUs it serves
        of gpus, each one's model and supported clocks (describe; else gpus[0]'s clocks). A
        GPU that cannot be described is reported in "error", for the driver to name."""
        a = self._agent()
        info = a.info()
        if not describe:
            return {"info": info, "clocks": a.supported_clocks(gpus[0]) if gpus else []}
        out = {"info": info, "gpus": {}, "error": None}
        try:
            names = {d["gpu"]: d["name"] for d in a.devices()}
            for g in gpus:
                if g in names:
                    out["gpus"][str(g)] = {"name": names[g], "clocks": a.supported_clocks(g)}
        except EerlError as e:
            out["error"] = (e.code, str(e))
        return out

    def cmd_lease(self, gpus):
        self._change().lease(gpus)

    def cmd_define(self, pools):
        """pools: {name: [gpus, gen_mhz, train_mhz, idle_mhz]}."""
        for name, (gpus, g, t, i) in pools.items():
            self._change().define_pool(name, gpus, g, t, i)
            self.pools[name] = gpus

    def cmd_step(self, gpus, phases=None, define=None, before=None, after=None):
        """One phase boundary on this node: optionally redefines pools and switches pools to
        phases ({name: phase}), sets the clocks of before ([[gpus, mhz], ...]; 0: the governor),
        reads the energy counters of gpus, then sets after. Returns ([energy_mj per gpu],
        [sm_mhz per gpu])."""
        a = self._agent()
        if define:
            self.cmd_define(define)
        for name, phase in (phases or {}).items():
            self._change().set_phase(name, phase)
        for gs, mhz in before or ():
            self._change().set_clocks(gs, mhz, mhz)
        r = a.read(gpus) if gpus else []
        for gs, mhz in after or ():
            self._change().set_clocks(gs, mhz, mhz)
        return [x[0] for x in r], [x[2] for x in r]

    def cmd_close(self, release=True):
        if self.agent is not None:
            try:
                if release:
                    self.agent.release(())
            finally:
                self.agent.close()
                self.agent = None


# ---- where the framework's workers are -----------------------------------------------------------


def _is_uuid(x):
    return isinstance(x, str) and x[:4] in ("GPU-", "MIG-")


def _norm_uuid(u):
    return u[4:].lower() if u[:4] == "GPU-" else u.lower()


def _cuda_uuids(devices):
    """UUIDs of this process's CUDA devices (ordinals in its visible list; None: all), or None
    where PyTorch or a CUDA device is missing. CUDA itself says which physical GPU an ordinal
    is, whatever CUDA_DEVICE_ORDER is."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    n = torch.cuda.device_count()
    ks = list(range(n)) if devices is None else [int(k) for k in devices]
    bad = [k for k in ks if not 0 <= k < n]
    if bad:
        raise ValueError("eerl.multinode.local_gpus: device %d, but this process sees %d CUDA "
                         "device(s)" % (bad[0], n))
    return ["GPU-%s" % torch.cuda.get_device_properties(k).uuid for k in ks]


def _ray_gpu_ids():
    """A Ray worker's assigned GPU ids in the order its CUDA_VISIBLE_DEVICES lists them, or
    None outside a Ray worker."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    ctx = ray.get_runtime_context()
    if ctx.worker.mode != ray.WORKER_MODE:
        return None  # the driver holds no GPU of its own
    ids = [str(x) for x in ctx.get_accelerator_ids().get("GPU", [])]
    env = [x for x in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x]
    return env if sorted(env) == sorted(ids) else ids


def local_gpus(devices=None):
    """The GPUs this process uses, as the node's GPU ids: UUIDs ("GPU-...") where they can be
    known, else NVML indices. devices: positions in this process's visible device list (e.g.
    [local_rank] when every rank of a node sees all its GPUs); None: every GPU it holds.

    Where the answer comes from, first that applies: CUDA in this process (torch.cuda: the
    UUID of each device; in a Ray worker that sees more devices than Ray gave it, those Ray
    gave it); a Ray worker's assigned GPU ids; CUDA_VISIBLE_DEVICES. Integer ids are taken as
    NVML indices, which they are when the node's GPUs are one model or
    CUDA_DEVICE_ORDER=PCI_BUS_ID; put UUIDs in CUDA_VISIBLE_DEVICES to be independent of it."""
    ray_ids = _ray_gpu_ids()
    cuda_devices = devices
    if devices is None and ray_ids is not None:
        try:
            import torch
            many = torch.cuda.is_available() and torch.cuda.device_count() > len(ray_ids)
        except ImportError:
            many = False
        if many:  # RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES: Ray's ids are CUDA ordinals
            cuda_devices = [int(x) for x in ray_ids]
    got = _cuda_uuids(cuda_devices)
    if got is not None:
        return got
    ids = ray_ids
    if ids is None:
        env = os.environ.get("CUDA_VISIBLE_DEVICES")
        if env is None:
            raise RuntimeError("eerl.multinode.local_gpus: cannot tell which GPUs this process "
                               "uses: no CUDA device, not a Ray worker, and "
                               "CUDA_VISIBLE_DEVICES is not set")
        ids = [x.strip() for x in env.split(",") if x.strip()]
    if devices is not None:
        try:
            ids = [ids[int(k)] for k in devices]
        except IndexError:
            raise ValueError("eerl.multinode.local_gpus: devices %r, but this process sees %d "
                             "GPU(s): %s" % (list(devices), len(ids), ids))
    return [x if _is_uuid(x) else int(x) for x in ids]


def where_am_i(devices=None):
    """This worker's record for MultiNodeSession's pools: {"node_id": the Ray node id (None
    outside Ray), "host", "pid", "rank": the torch.distributed rank (None without a group),
    "gpus": local_gpus(devices)}."""
    rec = {"node_id": None, "host": _socket.gethostname(), "pid": os.getpid(), "rank": None,
           "gpus": local_gpus(devices)}
    if _ray_gpu_ids() is not None:
        rec["node_id"] = sys.modules["ray"].get_runtime_context().get_node_id()
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        rec["rank"] = dist.get_rank()
    return rec


def _where_actor(_self, devices=None):
    return where_am_i(devices)


def ray_worker_gpus(actors, timeout_s=120.0):
    """Asks each Ray actor (the framework's own workers: verl's worker group's .workers, a
    list of handles) where it runs and which GPUs it holds; returns their records."""
    import ray
    refs = [a.__ray_call__.remote(_where_actor) for a in actors]
    return ray.get(refs, timeout=timeout_s)


def _where_task():
    return where_am_i()


def ray_placement_group_gpus(pg, timeout_s=120.0):
    """Records for every bundle of a Ray placement group that holds GPUs, from a short task
    that takes all of the bundle's GPUs. Call it before the workers take the bundles (a bundle
    whose GPUs are in use cannot run the task; after that ask the workers: ray_worker_gpus).
    With one GPU per bundle the answer is the GPU every worker of that bundle gets."""
    import ray
    from ray.util.placement_group import placement_group_table
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    ray.get(pg.ready(), timeout=timeout_s)
    bundles = placement_group_table(pg)["bundles"]
    task = ray.remote(_where_task)
    refs = []
    for i in sorted(bundles):
        g = bundles[i].get("GPU", 0)
        if g <= 0:
            continue
        refs.append(task.options(num_cpus=0, num_gpus=g, scheduling_strategy=
                                 PlacementGroupSchedulingStrategy(
                                     pg, placement_group_bundle_index=i)).remote())
    return ray.get(refs, timeout=timeout_s)


def torch_gather_gpus(devices=None, group=None):
    """Collective: every rank of group calls it with the devices it uses; every rank gets all
    ranks' records (where_am_i), in rank order."""
    import torch.distributed as dist
    out = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, where_am_i(devices), group=group)
    return out


def _worker_name(rec):
    parts = []
    if rec.get("rank") is not None:
        parts.append("rank %s" % rec["rank"])
    parts.append("pid %s on %s" % (rec.get("pid"), rec.get("host")))
    if rec.get("node_id"):
        parts.append("Ray node %s" % rec["node_id"])
    return "worker " + ", ".join(parts)


# ---- adapters ------------------------------------------------------------------------------------


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
            if not pool:
                raise ValueError("%s: the workers given hold no GPU" % role)
            pools[role] = {n: sorted(v) for n, v in sorted(pool.items())}
        return pools

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
        from ray.exceptions import GetTimeoutError, RayActorError
        timeout_s = self.timeout_s if timeout_s is None else float(timeout_s)
        nodes = sorted(per_node)
        gone = [n for n in nodes if n in self.lost]
        if gone:
            raise NodeLost(gone[0], "lost earlier", self.describe(gone[0]))
        refs = [self.actors[n].handle.remote(cmd, per_node[n], timeout_s) for n in nodes]
        deadline = time.monotonic() + timeout_s
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


# ---- the driver side -----------------------------------------------------------------------------

_ctl = None
_live = weakref.WeakSet()


def _ctl_fns():
    global _ctl
    if _ctl is None:
        d = _lib.declare
        P, I, U, S = C.c_void_p, C.c_int, C.c_uint, C.c_size_t
        _ctl = {
            "config_init": d("eerl_ctl_config_init", I, [I, C.POINTER(T.CtlConfig), S]),
            "new": d("eerl_ctl_new", I, [I, C.POINTER(T.CtlConfig), C.POINTER(U), S, U,
                                         C.POINTER(P)]),
            "free": d("eerl_ctl_free", None, [P]),
            "observe": d("eerl_ctl_observe", I, [P, C.POINTER(T.Obs), C.POINTER(T.Setting)]),
            "setting": d("eerl_ctl_setting", I, [P, C.POINTER(T.Setting)]),
            "events": d("eerl_ctl_events", S, [P, C.POINTER(T.Event), S]),
            "status": d("eerl_ctl_get_status", I, [P, C.POINTER(T.CtlStatus)]),
            "state_name": d("eerl_state_name", C.c_char_p, [I]),
            "kind_name": d("eerl_event_kind_name", C.c_char_p, [I]),
            "verdict_name": d("eerl_verdict_name", C.c_char_p, [I]),
        }
    return _ctl


def _num(x):
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def _clk(v):
    return v if v else "governor"


def _setting_json(s):
    return {"gen_mhz": _clk(s.mhz[0]), "train_mhz": _clk(s.mhz[1]), "idle_mhz": _clk(s.idle_mhz)}


def _config_json(cfg):
    """The controller configuration as the C trace header writes it (src/trace/trace.c): every
    field, so that eerl replay rebuilds the same controller."""
    out = {}
    for name, ctype in cfg._fields_:
        if name in ("size", "strategy", "block_choices", "static_setting", "group_names"):
            continue
        v = getattr(cfg, name)
        out[name] = float(v) if ctype is C.c_double else int(v)
    out["block_choices"] = [int(b) for b in cfg.block_choices if b]
    out["static_setting"] = _setting_json(cfg.static_setting)
    out["group_names"] = [cfg.group_names[k].value.decode()
                          for k in range(min(int(cfg.n_groups), len(cfg.group_names)))]
    return out


def _norm_pool(pool, key):
    """{node: [gpus]} from {node: [gpus]} or [(node, gpu), ...]."""
    if isinstance(pool, dict):
        out = {int(n): [int(g) for g in gs] for n, gs in pool.items() if gs}
    else:
        out = {}
        try:
            for n, g in pool:
                out.setdefault(int(n), []).append(int(g))
        except (TypeError, ValueError):
            raise ValueError("pools[%r] must be {node: [gpu, ...]} or [(node, gpu), ...], not %r"
                             % (key, pool))
    for n, gs in out.items():
        if n < 0 or any(g < 0 for g in gs):
            raise ValueError("pools[%r]: negative node or GPU index in %r" % (key, pool))
    return out


def _version_of(text):
    """(major, minor, patch) in a version text ("eerld 0.2.0"), or None."""
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(x or 0) for x in m.groups()) if m else None


def _compatible(v, mine):
    """Releases of one major version speak to each other; before 1.0, of one minor version."""
    return v[0] == mine[0] and (mine[0] > 0 or v[1] == mine[1])


class MultiNodeSession:
    """The controller in the driver, clocks and energy on every node through adapter.

    mode: "colocated", "disaggregated", "drained" or "inflight", as in eerl.Session.
    pools: {"generation": {node: [gpu, ...]}, "training": {node: [gpu, ...]}} (or lists of
    (node, gpu) pairs; adapter.locate() makes them). Colocated: the same GPUs in both; the other
    modes: disjoint. strategy, allowed_loss, observe_only, trace, run_info: as in eerl.Session.
    clock: the time source (seconds); give a virtual clock to drive it in virtual time.

    It keeps the books exactly as eerl.Session's runtime does (docs/runtime.md, "What it does at
    each call"): each pool's phases and busy intervals, a refit begun inside generation pausing
    it, a waiting pool of separate pools at the idle clock, phase energies (the allocation's
    while the phase ran, synchronous modes; each pool's own, asynchronous ones), each pool's
    energy and its arrival at the rendezvous, in-flight's carry-over and the policy age. Every
    interval starts and ends at a phase boundary, and every boundary reads every GPU of every
    node in one round trip, so each figure is a sum over nodes of counter differences."""

    def __init__(self, adapter, mode="colocated", pools=None, allowed_loss=0.02,
                 observe_only=False, trace=None, clock=time.monotonic, strategy="eerl",
                 run_info=None):
        self._ctl_h = None
        self._closed = True
        self._trace = None
        self._stopped = None
        if strategy not in T.STRATEGIES:
            raise ValueError("strategy %r: use one of %s" % (strategy, ", ".join(T.STRATEGIES)))
        if mode not in T.MODES:
            raise ValueError("MultiNodeSession mode %r: use one of %s"
                             % (mode, ", ".join(T.MODES)))
        if not isinstance(pools, dict) or set(pools) != {"generation", "training"}:
            raise ValueError("pools needs 'generation' and 'training', got %r" % (pools,))
        if run_info is not None and not isinstance(run_info, dict):
            raise ValueError("run_info must be a dict, not %r" % (run_info,))
        gen, train = _norm_pool(pools["generation"], "generation"), \
            _norm_pool(pools["training"], "training")
        if not gen or not train:
            raise ValueError("%s: both pools need GPUs, got generation %r and training %r"
                             % (mode, gen, train))
        if mode == "colocated":
            if gen != train:
                raise ValueError("colocated: both pools must be the same GPUs, got %r and %r"
                                 % (gen, train))
        else:
            both = [(n, g) for n in gen for g in gen[n] if g in train.get(n, [])]
            if both:
                raise ValueError("%s: GPU %d of node %d is in both pools"
                                 % ((mode,) + both[0][::-1]))
        for key, pool in (("generation", gen), ("training", train)):
            for n, gs in pool.items():
                if len(set(gs)) != len(gs):
                    raise ValueError("pools[%r]: node %d names a GPU twice: %r" % (key, n, gs))
        unknown = sorted((set(gen) | set(train)) - set(adapter.nodes))
        if unknown:
            raise ValueError("node %d is not one of the adapter's nodes %s"
                             % (unknown[0], adapter.nodes))
        self.adapter = adapter
        self.mode = mode
        self.colocated = mode == "colocated"
        self.overlapped = mode in ("drained", "inflight")
        self.observe_only = bool(observe_only)
        self.gen, self.train = gen, train
        self._pool_gpus = [gen] if self.colocated else [gen, train]
        self.nodes = sorted(set(gen) | set(train))
        self.all_gpus = {n: sorted(set(gen.get(n, [])) | set(train.get(n, []))) for n in self.nodes}
        self._pos = {n: {g: i for i, g in enumerate(self.all_gpus[n])} for n in self.nodes}
        self.clock = clock
        f = _ctl_fns()

        clocks = self._hello()
        self.peak = max(clocks)
        cfg = T.CtlConfig()
        _lib.check(f["config_init"](T.MODES[mode], C.byref(cfg), C.sizeof(cfg)),
                   "controller defaults")
        cfg.allowed_loss = float(allowed_loss)
        cfg.strategy = T.STRATEGIES[strategy]
        self.strategy = strategy
        arr = (C.c_uint * len(clocks))(*clocks)
        h = C.c_void_p()
        _lib.check(f["new"](T.MODES[mode], C.byref(cfg), arr, len(clocks), self.peak,
                            C.byref(h)), "building the controller (allowed loss %g)"
                   % allowed_loss)
        self._ctl_h = h
        self.allowed_loss = float(allowed_loss)
        self.clocks = sorted(set(clocks), reverse=True)
        self.applied = T.Setting()  # governor until the controller says otherwise
        f["setting"](h, C.byref(self.applied))
        self._prev_setting = None
        try:
            if not self.observe_only:
                adapter.call("lease", {n: {"gpus": self.all_gpus[n]} for n in self.nodes})
            if trace is not None:
                self._trace = open(os.fspath(trace), "w")
                self._write({"type": "header", "format": "eerl-trace", "version": 1,
                             "producer": "eerl %s python multinode" % _lib.__version__,
                             "mode": mode, "strategy": self.strategy,
                             "governor_peak_mhz": self.peak, "clocks_mhz": self.clocks,
                             "config": _config_json(cfg)})
                run = dict(run_info or {})
                run.update({"type": "run", "mode": mode, "nodes": len(self.nodes),
                            "pools": {"generation": {str(k): v for k, v in gen.items()},
                                      "training": {str(k): v for k, v in train.items()}},
                            "observe_only": self.observe_only,
                            "node_names": {str(n): adapter.describe(n) for n in self.nodes},
                            "node_eerld": {str(n): self._servers[n] for n in self.nodes}})
                uuids = getattr(adapter, "gpu_uuids", None)
                if uuids:
                    run["gpu_uuids"] = {str(n): {str(g): u for g, u in sorted(m.items())}
                                        for n, m in uuids.items() if n in self.nodes}
                self._write(run)
        except BaseException:
            self._teardown()
            raise
        self._closed = False
        np_ = len(self._pool_gpus)
        self._in = [set() for _ in range(np_)]       # phases each pool is in
        self._stack = [[] for _ in range(np_)]       # open phases, innermost last
        self._iv = [[[] for _ in range(5)] for _ in range(np_)]  # [[mark0, mark1], ...]
        self._refit_start = [None] * np_
        self._cur = [None] * np_                     # MHz each pool was put at (None: unknown)
        self._marks = []                             # [(t, {node: [energy_mj]})] this update
        self._m_update0 = None
        self._update = 1  # numbered from 1, as in eerl.Session and eerl sim
        self._last = None
        self.last_sm_mhz = {}
        _live.add(self)

    def _hello(self):
        """Asks every node's NodeServer about its eerld and the pools' GPUs; refuses (ValueError
        naming the node and the value) an eerld of another version, a pool GPU the node's eerld
        does not serve, and GPUs of another model or clock list than the first pool GPU's."""
        a = self.adapter
        try:
            hello = a.call("hello", {n: {"gpus": self.all_gpus[n], "describe": True}
                                     for n in self.nodes})
        except NodeError as e:
            if e.code == -21:  # EERL_EVERSION: the eerld refused our protocol version
                raise ValueError("%s: its eerld speaks another protocol version than this eerl "
                                 "%s (protocol 1): %s" % (a.describe(e.node), _lib.__version__,
                                                          e.why)) from e
            raise
        mine = _version_of(_lib.library_version())
        self._servers = {}
        for n in self.nodes:
            h = hello[n]
            server = h["info"].get("server", "")
            v = _version_of(server)
            if v is None or not _compatible(v, mine):
                raise ValueError(
                    "%s runs %r, which this eerl %s cannot drive: the multi-node session needs "
                    "an eerld of release %d.%s (upgrade that node's eerld, or run this eerl's "
                    "release there)" % (a.describe(n), server or "an eerld that gives no version",
                                        _lib.library_version(), mine[0],
                                        "x" if mine[0] > 0 else "%d.x" % mine[1]))
            self._servers[n] = server
        for key, pool in (("generation", self.gen), ("training", self.train)):
            for n, gs in pool.items():
                count = hello[n]["info"]["gpus"]
                bad = [g for g in gs if g >= count]
                if bad:
                    raise ValueError(
                        "pools[%r] names GPU %d of %s, whose eerld serves %s: no node serves "
                        "that GPU" % (key, bad[0], a.describe(n),
                                      "GPUs 0-%d" % (count - 1) if count else "no GPU"))
        first = None
        for n in self.nodes:
            h = hello[n]
            if h.get("error"):
                raise NodeError(n, h["error"][0], h["error"][1], a.describe(n))
            for g in self.all_gpus[n]:
                d = h["gpus"][str(g)]
                if first is None:
                    first = (n, g, d)
                    if not d["clocks"]:
                        raise EerlError(-6, "%s reported no supported clocks for GPU %d"
                                        % (a.describe(n), g))
                    continue
                n0, g0, d0 = first
                if d["name"] != d0["name"]:
                    raise ValueError("GPU %d of %s is a %r, but GPU %d of %s is a %r: one "
                                     "session needs one GPU model" % (
                                         g, a.describe(n), d["name"], g0, a.describe(n0),
                                         d0["name"]))
                if sorted(d["clocks"]) != sorted(d0["clocks"]):
                    c, c0 = d["clocks"] or [0], d0["clocks"]
                    raise ValueError(
                        "GPU %d of %s supports other clocks than GPU %d of %s (%s ... %s MHz, "
                        "%d clocks, against %s ... %s MHz, %d): one session needs one clock "
                        "list" % (g, a.describe(n), g0, a.describe(n0), max(c), min(c),
                                  len(d["clocks"]), max(c0), min(c0), len(c0)))
        return first[2]["clocks"]

    # ---- plumbing -------------------------------------------------------------------------------

    def _write(self, obj):
        self._trace.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._trace.flush()

    def _phase_clock(self, p, ph):
        """The clock pool p runs phase ph at under the applied setting (runtime.c's
        phase_clock); None for "other", which leaves the clock alone."""
        s = self.applied
        if ph == 0:
            return s.mhz[0]
        if ph in (1, 2):
            return s.mhz[1]
        if ph == 3:
            return s.mhz[1] if (self.colocated or p == 1) else s.mhz[0]
        return None

    def _want(self, p, mhz, out):
        """Pool p to mhz at this boundary unless it is there already (runtime.c's pool_lock)."""
        if self.observe_only or mhz is None or (self._cur[p] == mhz):
            return
        out.append((p, mhz))
        self._cur[p] = mhz

    def _sets(self, locks):
        """{node: [[gpus, mhz], ...]} for the pool locks [(pool, mhz), ...]."""
        per = {}
        for p, mhz in locks:
            for n, gs in self._pool_gpus[p].items():
                per.setdefault(n, []).append([gs, int(mhz)])
        return per

    def _step(self, at, before=(), after=()):
        """One phase boundary: one command to every node, all in flight together, that sets the
        pools that change clock (before the read: at a begin; after it: at an end) and reads
        every GPU's energy counter. Returns the boundary's mark index."""
        b, a = self._sets(before), self._sets(after)
        per = {}
        for n in self.nodes:
            args = {"gpus": self.all_gpus[n]}
            if n in b:
                args["before"] = b[n]
            if n in a:
                args["after"] = a[n]
            per[n] = args
        try:
            res = self.adapter.call("step", per)
        except NodeError as e:
            self._stop(e, at)
        t = self.clock()
        self._marks.append((t, {n: res[n][0] for n in self.nodes}))
        self.last_sm_mhz = {n: res[n][1] for n in self.nodes}
        return len(self._marks) - 1

    def _energy(self, m0, m1, pool=None):
        """Joules between two marks over every GPU (pool None) or over a pool's GPUs."""
        e0, e1 = self._marks[m0][1], self._marks[m1][1]
        tot = 0
        for n in self.nodes:
            if pool is None:
                idx = range(len(self.all_gpus[n]))
            else:
                idx = [self._pos[n][g] for g in pool.get(n, [])]
            for i in idx:
                tot += e1[n][i] - e0[n][i]
        return tot / 1000.0

    def _t(self, m):
        return self._marks[m][0]

    def _busy(self, ivs):
        return sum(self._t(b) - self._t(a) for a, b in ivs)

    def _pools_for(self, key, pool):
        if self.colocated:
            if pool is not None and pool not in ("generation", "training", "both"):
                raise ValueError("pool %r: use 'generation', 'training' or 'both'" % (pool,))
            return [0]
        if pool is None:
            return {"generation": [0], "logprob": [1], "training": [1]}.get(key, [0, 1])
        table = {"generation": [0], "training": [1], "both": [0, 1]}
        if pool not in table:
            raise ValueError("pool %r: use 'generation', 'training' or 'both'" % (pool,))
        return table[pool]

    # ---- the Session interface ------------------------------------------------------------------

    def _require_open(self):
        if self._closed:
            raise EerlError(-15, "the multi-node session is closed" +
                            (" (it stopped: %s)" % self._stopped if self._stopped else ""))

    def _open_phases(self):
        names = list(T.PHASES)
        return sorted({names[ph] for p in self._in for ph in p})

    def _stop(self, e, at):
        """A node failed or was lost mid-run: the session cannot account for the allocation's
        energy any more, so it stops. Every other node is released (eerld puts its GPUs back to
        the governor); the failed node's eerld resets its GPUs when the connection drops (a
        lost node) or when we close it (a node that answered with an error); the trace gets a
        line saying which node and why, after the updates it already has; then NodeLost (or
        NodeError) is raised naming the node."""
        lost = isinstance(e, NodeLost)
        n = e.node
        gone = getattr(self.adapter, "lost", ())
        released, failed = [], []
        for m in self.nodes:  # one by one: each node's outcome is its own
            if m in gone or (lost and m == n):
                continue
            try:
                self.adapter.call("close", {m: {"release": not self.observe_only}})
                released.append(m)
            except NodeError as e2:
                failed.append("%s (%s)" % (self.adapter.describe(m), e2.why))
        release_error = "; ".join(failed) or None
        where = "update %d, at %s" % (self._update, at)
        parts = [getattr(self.adapter, "lost_note", _Adapter.lost_note)] if lost else []
        if released:
            parts.append("node%s %s %s back at the governor" % (
                "s" if len(released) > 1 else "", ", ".join(map(str, released)),
                "are" if len(released) > 1 else "is"))
        if failed:
            parts.append("releasing failed on %s, whose eerld resets its GPUs when the "
                         "connection closes or when it starts again" % release_error)
        msg = "%s %s in %s: %s. The session stopped: %s; the trace keeps %s" % (
            self.adapter.describe(n), "was lost" if lost else "failed", where, e.why,
            "; ".join(parts) or "no node to release",
            "updates 1-%d" % (self._update - 1) if self._update > 1 else "no update")
        if self._trace is not None:
            self._write({"type": "node_lost" if lost else "node_error", "node": n,
                         "name": self.adapter.describe(n), "update": self._update,
                         "at": at, "open_phases": self._open_phases(), "why": e.why,
                         "action": "stopped", "released": released,
                         "release_error": release_error})
        self._stopped = msg
        self._closed = True
        _live.discard(self)
        if self._trace is not None:
            self._trace.close()
            self._trace = None
        if self._ctl_h is not None:
            _ctl_fns()["free"](self._ctl_h)
            self._ctl_h = None
        err = NodeLost(n, e.why) if lost else NodeError(n, e.code, e.why)
        err.message = msg
        err.args = (msg,)
        raise err from e

    def phase_begin(self, name, pool=None):
        """A phase begins on a pool (default: the pool that runs it in this mode; refit and
        other: both), as in eerl.Session: its clock is applied on every node of the pool and
        every GPU is read, in one round trip."""
        self._require_open()
        key, ph = T.phase_id(name)
        ps = self._pools_for(key, pool)
        for p in ps:
            if ph in self._in[p]:
                raise EerlError(-15, "beginning phase %s" % key, "the %s pool is already in it"
                                % ("training" if p else "generation"))
        locks = []
        for p in ps:
            self._want(p, self._phase_clock(p, ph), locks)
        m = self._step("the begin of phase %s" % key, before=locks)
        if self._m_update0 is None:
            self._m_update0 = m
        for p in ps:
            if ph == 3 and self._refit_start[p] is None:
                self._refit_start[p] = m
            self._in[p].add(ph)
            st = self._stack[p]
            if st:  # the phase it interrupts stops accruing here
                self._iv[p][st[-1]][-1][1] = m
            st.append(ph)
            self._iv[p][ph].append([m, m])
        return key

    def phase_end(self, name, pool=None):
        self._require_open()
        key, ph = T.phase_id(name)
        ps = self._pools_for(key, pool)
        for p in ps:
            if ph not in self._in[p]:
                raise EerlError(-15, "ending phase %s" % key, "the %s pool is not in it"
                                % ("training" if p else "generation"))
        # what each pool does after the boundary: resume the phase an inner one interrupted (at
        # its own clock), or, separate pools with nothing open, wait at the idle clock
        locks, resume = [], {}
        for p in ps:
            st = self._stack[p]
            top = st[-1] == ph
            left = [x for x in st if x != ph]
            if top and left:
                resume[p] = left[-1]
                self._want(p, self._phase_clock(p, left[-1]), locks)
            elif not left and not self.colocated and self.applied.idle_mhz != 0:
                self._want(p, self.applied.idle_mhz, locks)
        m = self._step("the end of phase %s" % key, after=locks)
        for p in ps:
            st = self._stack[p]
            if st[-1] == ph:  # else its interval was closed when an inner phase began
                self._iv[p][ph][-1][1] = m
            self._stack[p] = [x for x in st if x != ph]
            self._in[p].discard(ph)
            if p in resume:
                self._iv[p][resume[p]].append([m, m])

    def phase(self, name, pool=None):
        from .session import _Phase
        return _Phase(self, name, pool)

    def update_end(self, generated_tokens, valid_tokens, longest_response, policy_version=None,
                   update=None):
        self._require_open()
        open_ = self._open_phases()
        if open_:
            raise EerlError(-15, "ending update %d" % self._update,
                            "phase %s is still open" % ", ".join(open_))
        if self._m_update0 is None:
            raise EerlError(-15, "ending update %d" % self._update, "no phase began")
        for what, v in (("generated_tokens", generated_tokens), ("valid_tokens", valid_tokens),
                        ("longest_response", longest_response)):
            try:
                float(v)
            except (TypeError, ValueError):
                raise ValueError("%s must be a number, not %r" % (what, v))
        f = _ctl_fns()
        m1 = self._step("the end of the update")
        m0 = self._m_update0
        o = self._observation(m0, m1, generated_tokens, valid_tokens, longest_response,
                              policy_version, update)
        req = T.Setting()
        f["setting"](self._ctl_h, C.byref(req))
        nxt = T.Setting()
        rc = f["observe"](self._ctl_h, C.byref(o), C.byref(nxt))
        evs = (T.Event * 256)()
        n_ev = f["events"](self._ctl_h, evs, 256)
        if self._trace is not None:
            self._write(self._update_line(o, req, evs, n_ev, m0, m1))
        self._prev_setting = bytes(o.setting)
        if rc == 0 and not self.observe_only:
            self.applied = nxt
        self._last = (o, rc == 0)
        self._update = o.update + 1
        # the next update starts where this one ended
        self._marks = [self._marks[m1]]
        self._m_update0 = 0
        for p in range(len(self._pool_gpus)):
            self._iv[p] = [[] for _ in range(5)]
            self._refit_start[p] = None
        return self.metrics()

    def _observation(self, m0, m1, G, N, L, policy_version, update):
        """The update's observation, as runtime.c's build_obs makes it."""
        o = T.Obs()
        o.update = self._update if update is None else int(update)
        o.gen_tokens = float(G)
        o.valid_tokens = float(N)
        o.longest_tokens = float(L)
        o.policy_age = (o.update - int(policy_version)
                        if policy_version is not None and 0 <= int(policy_version) <= o.update
                        else -1)
        t0 = self._t(m0)
        o.time_s = self._t(m1) - t0
        o.energy_j = self._energy(m0, m1)
        np_ = len(self._pool_gpus)
        for ph in range(5):
            best, bp = 0.0, 0
            for p in range(np_):
                b = self._busy(self._iv[p][ph])
                if b > best:
                    best, bp = b, p
            o.phase_time_s[ph] = best
            if best <= 0:
                continue
            if not self.overlapped:  # stages in turn: the allocation's energy while it ran
                o.phase_energy_j[ph] = sum(self._energy(a, b) for a, b in self._iv[bp][ph]
                                           if self._t(b) > self._t(a))
            else:  # pools overlap: each pool's own energy while it ran the phase
                o.phase_energy_j[ph] = sum(
                    self._energy(a, b, self._pool_gpus[p]) for p in range(np_)
                    for a, b in self._iv[p][ph] if self._t(b) > self._t(a))
        self._pool_busy = [sum(self._busy(self._iv[p][ph]) for ph in range(5))
                           for p in range(np_)]
        if not self.colocated:
            for p in range(2):
                o.pool_energy_j[p] = self._energy(m0, m1, self._pool_gpus[p])
                # arrival at the rendezvous: the end of the pool's last work before its refit
                arr, rs = 0.0, self._refit_start[p]
                for ph in (0, 1, 2):
                    for a, b in self._iv[p][ph]:
                        if rs is not None and self._t(a) >= self._t(rs):
                            continue
                        arr = max(arr, self._t(b) - t0)
                o.arrival_s[p] = arr
            o.flags |= T.OBS_POOL_ENERGY | T.OBS_ARRIVALS
        o.setting = self.applied
        if self.mode == "inflight" and self._prev_setting is not None and \
                self._prev_setting != bytes(self.applied):
            o.flags |= T.OBS_CARRYOVER
        return o

    def _update_line(self, o, req, evs, n_ev, m0, m1):
        """docs/trace-format.md's update line (as eerl.Session writes it), its "runtime" record
        and the energy of each node over the update."""
        f = _ctl_fns()
        phases = {}
        for i, name in enumerate(T.PHASES):
            if o.phase_time_s[i] or o.phase_energy_j[i]:
                phases[name] = {"time_s": _num(o.phase_time_s[i]),
                                "energy_j": _num(o.phase_energy_j[i])}
        line = {"type": "update", "update": o.update,
                "work": {"G": o.gen_tokens, "N": o.valid_tokens, "L": o.longest_tokens},
                "time_s": _num(o.time_s), "energy_j": _num(o.energy_j), "phases": phases}
        if o.policy_age >= 0:
            line["work"]["policy_age"] = o.policy_age
        if o.flags & (T.OBS_ARRIVALS | T.OBS_POOL_ENERGY):
            pools = {}
            for i, name in enumerate(("generation", "training")):
                p = {}
                if o.flags & T.OBS_ARRIVALS:
                    p["arrival_s"] = _num(o.arrival_s[i])
                if o.flags & T.OBS_POOL_ENERGY:
                    p["energy_j"] = _num(o.pool_energy_j[i])
                pools[name] = p
            line["pools"] = pools
        if o.flags & T.OBS_CARRYOVER:
            line["carryover"] = True
        other = o.flags & ~(T.OBS_ARRIVALS | T.OBS_POOL_ENERGY | T.OBS_CARRYOVER)
        if other:
            line["flags"] = other
        line["setting"] = {"requested": _setting_json(req), "observed": _setting_json(o.setting)}
        events = []
        for k in range(n_ev):
            ev = evs[k]
            events.append({
                "kind": f["kind_name"](ev.kind).decode(),
                "state": f["state_name"](ev.state).decode(),
                "candidate": _setting_json(ev.candidate), "next": _setting_json(ev.next),
                "verdict": f["verdict_name"](ev.verdict).decode(), "n_updates": ev.n_updates,
                "time_ratio": _num(ev.time_ratio), "energy_ratio": _num(ev.energy_ratio),
                "meas_time_ratio": _num(ev.meas_time_ratio),
                "meas_energy_ratio": _num(ev.meas_energy_ratio),
                "reason": ev.reason.decode(errors="replace")})
        line["events"] = events
        busy = {"generation": _num(self._pool_busy[0])}
        if not self.colocated:
            busy["training"] = _num(self._pool_busy[1])
        e0, e1 = self._marks[m0][1], self._marks[m1][1]
        line["runtime"] = {
            "t_start": self._t(m0), "t_end": self._t(m1), "pool_busy_s": busy,
            "meter_flags": "",
            "node_energy_j": {str(n): _num(sum(b - a for a, b in zip(e0[n], e1[n])) / 1000.0)
                              for n in self.nodes}}
        return line

    def status(self):
        self._require_open()
        f = _ctl_fns()
        st = T.CtlStatus()
        _lib.check(f["status"](self._ctl_h, C.byref(st)), "controller status")
        return {"state": f["state_name"](st.state).decode(), "locked": bool(st.locked),
                "observed": st.observed, "rejected": st.rejected, "trials": st.trials,
                "requested": st.setting.to_dict()}

    def applied_setting(self):
        return self.applied.to_dict() if not self.observe_only else T.Setting().to_dict()

    def metrics(self):
        st = self.status()
        s = self.applied_setting()
        m = {"eerl/state": st["state"], "eerl/locked": int(st["locked"]),
             "eerl/gen_mhz": s["gen_mhz"], "eerl/train_mhz": s["train_mhz"],
             "eerl/idle_mhz": s["idle_mhz"], "eerl/observed": st["observed"],
             "eerl/rejected": st["rejected"], "eerl/trials": st["trials"],
             "eerl/nodes": len(self.nodes)}
        if self._last is not None:
            o, ok = self._last
            m.update({"eerl/update": int(o.update), "eerl/update_energy_j": o.energy_j,
                      "eerl/update_time_s": o.time_s,
                      "eerl/energy_per_valid_token_j": o.energy_j / o.valid_tokens
                      if o.valid_tokens > 0 else float("nan"),
                      "eerl/valid_tokens_per_s": o.valid_tokens / o.time_s
                      if o.time_s > 0 else float("nan"),
                      "eerl/accepted": int(ok)})
        return m

    @property
    def closed(self):
        return self._closed

    def _teardown(self):
        err = None
        try:
            self.adapter.call("close", {n: {"release": not self.observe_only}
                                        for n in self.nodes})
        except EerlError as e:
            err = e
        if self._trace is not None:
            self._trace.close()
            self._trace = None
        if self._ctl_h is not None:
            _ctl_fns()["free"](self._ctl_h)
            self._ctl_h = None
        return err

    def close(self):
        """Releases every node's GPUs (eerld resets their clocks) and closes the trace. The
        adapter stays open (close it yourself: TorchDistributedAdapter.close stops the node
        ranks' serve())."""
        if self._closed:
            return
        self._closed = True
        _live.discard(self)
        err = self._teardown()
        if err is not None:
            raise err

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


@atexit.register
def _close_all():
    for s in list(_live):
        try:
            s.close()
        except Exception:
            pass
