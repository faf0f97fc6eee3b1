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
a phase boundary's clock settings and energy read, close).

MultiNodeSession is eerl.Session's runtime (src/runtime, the same C session: observations, the
meter's counter model and flags, the controller, resume, the trace) over the GPUs of every node:
the runtime sees them as one remote device (eerl_device_open_remote), whose read asks every
node at once, and sets their clocks through a clock owner that sends them to the nodes. At
every phase boundary the driver sends one command to all nodes, all in flight together, that
sets the clocks the runtime changed and reads every GPU's energy counter, power and clock. This
module finds the nodes and pools, serves the node side, reaches each node's eerld and notices
lost nodes; it builds no observation and writes no trace line. At the session's start each
node's eerld release, GPUs, models and clock lists are checked. Closing it (or collecting it,
or the process exiting) releases every lease; eerld resets those GPUs. A node lost or failing
mid-run stops it: the others are released, the runtime ends the trace with a line naming the
node, and NodeLost / NodeError is raised.
"""

import ctypes as C
import json
import os
import pickle
import re
import socket as _socket
import sys
import time

from . import _lib
from . import _types as T
from . import options
from ._lib import EerlError
from .session import (_U32_MAX, _RuntimeSession, _c, _install_sigterm, _live, _live_lock,
                      _ranged_int)

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
            devs = {d["gpu"]: d for d in a.devices()}
            for g in gpus:
                if g in devs:
                    out["gpus"][str(g)] = {"name": devs[g]["name"], "uuid": devs[g]["uuid"],
                                           "clocks": a.supported_clocks(g)}
        except EerlError as e:
            out["error"] = (e.code, str(e))
        return out

    def cmd_lease(self, gpus):
        self._change().lease(gpus)

    def cmd_step(self, gpus, before=None, after=None):
        """One phase boundary on this node: sets the clocks of before ([[gpus, mhz], ...]; 0:
        the governor), reads gpus, then sets after. Returns [[err, energy_mj, power_mw, sm_mhz]
        per GPU read], err 0 or the EERL_E* code of a GPU eerld could not read (lost, no energy
        counter), which the driver's meter flags as it would on its own node."""
        for gs, mhz in before or ():
            self._change().set_clocks(gs, mhz, mhz)
        r = [list(x) for x in self._agent().readings(gpus)] if gpus else []
        for gs, mhz in after or ():
            self._change().set_clocks(gs, mhz, mhz)
        return r

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


# ---- the driver side -----------------------------------------------------------------------------


def _index(x, what, key):
    """x as a non-negative int index (a node given as 0 or "0" is node 0), else ValueError."""
    try:
        if isinstance(x, bool) or (isinstance(x, float) and not x.is_integer()):
            raise ValueError
        n = int(x)
    except (TypeError, ValueError):
        raise ValueError("pools[%r]: %s %r is not an index" % (key, what, x)) from None
    if n < 0:
        raise ValueError("pools[%r]: %s %d is negative" % (key, what, n))
    return n


def _norm_pool(pool, key):
    """{node: [gpu, ...] sorted} from {node: [gpus]} or [(node, gpu), ...]. A node named twice
    (0 and "0") is one node with the GPUs of both; a GPU named twice is refused."""
    try:
        if isinstance(pool, dict):
            pairs = [(n, g) for n, gs in pool.items() for g in gs]
        else:
            pairs = [(n, g) for n, g in pool]
    except (TypeError, ValueError):
        raise ValueError("pools[%r] must be {node: [gpu, ...]} or [(node, gpu), ...], not %r"
                         % (key, pool)) from None
    out = {}
    for n, g in pairs:
        n, g = _index(n, "node", key), _index(g, "GPU", key)
        if g in out.get(n, ()):
            raise ValueError("pools[%r]: node %d names GPU %d twice: %r" % (key, n, g, pool))
        out.setdefault(n, []).append(g)
    return {n: sorted(gs) for n, gs in sorted(out.items())}


def _version_of(text):
    """(major, minor, patch) in a version text ("eerld 0.2.0"), or None."""
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(x or 0) for x in m.groups()) if m else None


def _compatible(v, mine):
    """Releases of one major version speak to each other; before 1.0, of one minor version."""
    return v[0] == mine[0] and (mine[0] > 0 or v[1] == mine[1])


_device_fns = None


def _dev_c():
    global _device_fns
    if _device_fns is None:
        d = _lib.declare
        P, I, U, S = C.c_void_p, C.c_int, C.c_uint, C.c_size_t
        _device_fns = {
            "open": d("eerl_device_open_remote", I, [U, T.DEVICE_READ_FN, P, C.POINTER(P)]),
            "describe": d("eerl_device_remote_describe", I, [P, U, C.c_char_p, C.c_char_p,
                                                             C.POINTER(U), S]),
            "free": d("eerl_device_free", None, [P]),
            "last_error": d("eerl_device_last_error", C.c_char_p, [P]),
        }
    return _device_fns


class MultiNodeSession(_RuntimeSession):
    """A session across nodes: eerl.Session's runtime (the C runtime: observations, the meter's
    counter model and flags, the controller, resume, the trace), over the GPUs of every node,
    which it reads and whose clocks it sets through adapter.

    mode, allowed_loss, observe_only, trace, strategy, run_info, resume_from, resume_tag, clock,
    governor_peak_mhz, prior, job_model, install_sigterm: as in eerl.Session (resume_tag's
    default names the GPU model, the pool sizes and the node count; install_sigterm defaults to
    False here, as the driver is often not the main thread). eerl.Session's eerld= and
    meter_interval_ms= have no meaning across nodes (each node's eerld is the NodeServer's; the
    meter reads at the phase boundaries): eerl.integrations._common.SINGLE_NODE_ONLY.
    pools: {"generation": {node: [gpu, ...]}, "training": {node: [gpu, ...]}} (or lists
    of (node, gpu) pairs; adapter.locate() makes them), GPUs as each node's NVML indices.
    Colocated: the same GPUs in both; the other modes: disjoint.

    The runtime sees the pools' GPUs as one remote device (eerl_device_open_remote), node by node
    in node order. At each phase boundary its meter reads every GPU of every node in one command
    to every node, all in flight together, which first sets the clocks the runtime changed
    before the boundary (a phase's begin); clocks it changes after the boundary (a phase's end:
    the idle clock, the clock of a phase that resumes) go out as the call returns. At its start
    each node's eerld release, GPUs, models and clock lists are checked. Closing it (or
    collecting it, or the process exiting) releases every lease; eerld resets those GPUs. A node
    lost or failing mid-run stops it: the others are released, the runtime ends the trace with a
    line naming the node, and NodeLost / NodeError is raised."""

    def __init__(self, adapter, mode="colocated", pools=None, allowed_loss=None,
                 observe_only=False, trace=None, clock=None, strategy=None, run_info=None,
                 resume_from=None, resume_tag=None, governor_peak_mhz=0, prior=None,
                 job_model=None, install_sigterm=False):
        self._init_common()
        # The options first, before any node is asked anything.
        o = options.check_keywords({"allowed_loss": allowed_loss, "strategy": strategy},
                                   "MultiNodeSession")
        allowed_loss, strategy = o["allowed_loss"], o["strategy"]
        governor_peak_mhz = _ranged_int("governor_peak_mhz", governor_peak_mhz, 0, _U32_MAX)
        self._stopped = None      # why the session stopped, once a node made it stop
        self._failure = None      # a node's failure seen inside a runtime call
        self._pending = []        # clock changes the runtime made since the last command
        self._leased = False
        self._released = False
        self._owner_err = b""
        self.last_sm_mhz = {}
        if mode not in T.MODES:
            raise ValueError("MultiNodeSession mode %r: use one of %s"
                             % (mode, ", ".join(T.MODES)))
        self.adapter = adapter
        self.mode = mode
        self.strategy = strategy
        self.observe_only = bool(observe_only)
        self.trace = os.fspath(trace) if trace is not None else None
        self._pools(pools)
        names, uuids, clocks, servers = self._hello()
        self.clocks = sorted(set(clocks[0]), reverse=True)
        self.peak = self.clocks[0]
        self._open_remote(names, uuids, clocks)
        try:
            if not self.observe_only:
                adapter.call("lease", {n: {"gpus": self.all_gpus[n]} for n in self.nodes})
                self._leased = True
            cfg = self._config(
                mode, [self._index[x] for x in self._pairs(self.gen)],
                [self._index[x] for x in self._pairs(self.train)], allowed_loss, strategy,
                trace, self._run_line(run_info, servers),
                "eerl %s python multinode" % _lib.__version__, clock=clock,
                resume_from=resume_from,
                resume_tag=resume_tag if resume_tag is not None else self._tag(names[0]),
                sample_thread=False, governor_peak_mhz=governor_peak_mhz, prior=prior,
                job_model=job_model)
        except BaseException:
            self._free_device()
            raise
        self._owner = T.RtClockOwner(None, T.LOCK_FN(self._lock_cb),
                                     T.RESTORE_FN(self._restore_cb),
                                     T.LAST_ERROR_FN(self._owner_error_cb))
        cfg.owner = C.pointer(self._owner)
        self._node_of = (C.c_uint * len(self._where))(*[n for n, _ in self._where])
        cfg.node_of = C.cast(self._node_of, C.POINTER(C.c_uint))
        cfg.n_node_of = len(self._where)
        self._start(cfg)
        if install_sigterm:
            _install_sigterm()

    # ---- the pools and the nodes ----------------------------------------------------------------

    def _pools(self, pools):
        """Checks pools; sets gen, train, nodes, all_gpus and the device's GPU list (_where:
        (node, NVML index) per device index, node by node)."""
        if not isinstance(pools, dict) or set(pools) != {"generation", "training"}:
            raise ValueError("pools needs 'generation' and 'training', got %r" % (pools,))
        gen = _norm_pool(pools["generation"], "generation")
        train = _norm_pool(pools["training"], "training")
        if not gen or not train:
            raise ValueError("%s: both pools need GPUs, got generation %r and training %r"
                             % (self.mode, gen, train))
        if self.mode == "colocated":
            if gen != train:
                raise ValueError("colocated: both pools must be the same GPUs, got %r and %r"
                                 % (gen, train))
        else:
            both = [(n, g) for n in gen for g in gen[n] if g in train.get(n, [])]
            if both:
                raise ValueError("%s: GPU %d of node %d is in both pools"
                                 % ((self.mode,) + both[0][::-1]))
        unknown = sorted((set(gen) | set(train)) - set(self.adapter.nodes))
        if unknown:
            raise ValueError("node %d is not one of the adapter's nodes %s"
                             % (unknown[0], self.adapter.nodes))
        self.gen, self.train = gen, train
        self.nodes = sorted(set(gen) | set(train))
        self.all_gpus = {n: sorted(set(gen.get(n, [])) | set(train.get(n, [])))
                         for n in self.nodes}
        self._where = [(n, g) for n in self.nodes for g in self.all_gpus[n]]
        self._index = {x: i for i, x in enumerate(self._where)}

    @staticmethod
    def _pairs(pool):
        return [(n, g) for n, gs in sorted(pool.items()) for g in gs]

    def _hello(self):
        """Asks every node's NodeServer about its eerld and the pools' GPUs; refuses (ValueError
        naming the node and the value) an eerld of another version, a pool GPU the node's eerld
        does not serve, and GPUs of another model or clock list than the first pool GPU's.
        Returns each device GPU's name, UUID and clocks, and each node's eerld version."""
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
        servers = {n: self._check_server(n, hello[n]["info"]) for n in self.nodes}
        for key, pool in (("generation", self.gen), ("training", self.train)):
            for n, gs in pool.items():
                count = hello[n]["info"]["gpus"]
                bad = [g for g in gs if g >= count]
                if bad:
                    raise ValueError(
                        "pools[%r] names GPU %d of %s, whose eerld serves %s: no node serves "
                        "that GPU" % (key, bad[0], a.describe(n),
                                      "GPUs 0-%d" % (count - 1) if count else "no GPU"))
        for n in self.nodes:
            if hello[n].get("error"):
                raise NodeError(n, hello[n]["error"][0], hello[n]["error"][1], a.describe(n))
        descs = [hello[n]["gpus"][str(g)] for n, g in self._where]
        self._check_same(descs)
        return ([d["name"] for d in descs], [d.get("uuid", "") for d in descs],
                [d["clocks"] for d in descs], servers)

    def _check_server(self, n, info):
        mine = _version_of(_lib.library_version())
        server = info.get("server", "")
        v = _version_of(server)
        if v is None or not _compatible(v, mine):
            raise ValueError(
                "%s runs %r, which this eerl %s cannot drive: the multi-node session needs "
                "an eerld of release %d.%s (upgrade that node's eerld, or run this eerl's "
                "release there)" % (self.adapter.describe(n),
                                    server or "an eerld that gives no version",
                                    _lib.library_version(), mine[0],
                                    "x" if mine[0] > 0 else "%d.x" % mine[1]))
        return server

    def _check_same(self, descs):
        """One GPU model and one clock list across the pools (one controller drives them)."""
        a = self.adapter
        (n0, g0), d0 = self._where[0], descs[0]
        if not d0["clocks"]:
            raise EerlError(-6, "%s reported no supported clocks for GPU %d"
                            % (a.describe(n0), g0))
        for (n, g), d in zip(self._where[1:], descs[1:]):
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

    def _tag(self, name):
        """The allocation a saved state belongs to: GPU model, pool sizes, node count."""
        ng, nt = len(self._pairs(self.gen)), len(self._pairs(self.train))
        sizes = "%d" % ng if self.mode == "colocated" else "%d/%d" % (ng, nt)
        return "%.40s %s on %d node%s" % (name, sizes, len(self.nodes),
                                          "" if len(self.nodes) == 1 else "s")

    def _run_line(self, run_info, servers):
        """What the trace's run line says of the nodes, after the caller's run_info."""
        if run_info is not None and not isinstance(run_info, dict):
            raise ValueError("run_info must be a dict, not %r" % (run_info,))
        a = self.adapter
        run = dict(run_info or {})
        run.update({"nodes": len(self.nodes),
                    "node_pools": {"generation": {str(k): v for k, v in self.gen.items()},
                                   "training": {str(k): v for k, v in self.train.items()}},
                    "node_gpus": [[n, g] for n, g in self._where],
                    "node_names": {str(n): a.describe(n) for n in self.nodes},
                    "node_eerld": {str(n): servers[n] for n in self.nodes}})
        uuids = getattr(a, "gpu_uuids", None)
        if uuids:
            run["gpu_uuids"] = {str(n): {str(g): u for g, u in sorted(m.items())}
                                for n, m in uuids.items() if n in self.nodes}
        return run

    # ---- the runtime's device and clock owner ----------------------------------------------------

    def _open_remote(self, names, uuids, clocks):
        f = _dev_c()
        self._read_fn = T.DEVICE_READ_FN(self._read_cb)
        dev = C.c_void_p()
        _lib.check(f["open"](len(self._where), self._read_fn, None, C.byref(dev)),
                   "opening the nodes' GPUs as one device (%d GPUs)" % len(self._where))
        self._dev = dev
        try:
            for i, (n, g) in enumerate(self._where):
                arr = (C.c_uint * len(clocks[i]))(*clocks[i])
                _lib.check(f["describe"](dev, i, names[i].encode(), uuids[i].encode(), arr,
                                         len(clocks[i])),
                           "describing GPU %d of %s" % (g, self.adapter.describe(n)),
                           lambda: f["last_error"](dev))
        except BaseException:
            self._free_device()
            raise

    def _sets(self, changes):
        """{node: [[gpus, mhz], ...]} for the runtime's clock changes [(device GPUs, mhz)]."""
        per = {}
        for gpus, mhz in changes:
            on = {}
            for i in gpus:
                n, g = self._where[i]
                on.setdefault(n, []).append(g)
            for n, gs in on.items():
                per.setdefault(n, []).append([gs, int(mhz)])
        return per

    def _read_cb(self, _ctx, ret, n):
        """The remote device's read (the meter, at a boundary): one command to every node, all
        in flight together, that applies the clock changes made since the last command, then
        reads every GPU of the node."""
        try:
            sets, self._pending = self._sets(self._pending), []
            per = {m: {"gpus": self.all_gpus[m]} for m in self.nodes}
            for m, s in sets.items():
                per[m]["before"] = s
            res = self.adapter.call("step", per)
            k = 0
            for m in self.nodes:
                rows = res[m]
                if len(rows) != len(self.all_gpus[m]):
                    raise NodeError(m, -10, "answered %d readings for %d GPUs"
                                    % (len(rows), len(self.all_gpus[m])),
                                    self.adapter.describe(m))
                self.last_sm_mhz[m] = [r[3] for r in rows]
                for err, mj, mw, mhz in rows:
                    ret[k].err, ret[k].energy_mj, ret[k].power_mw, ret[k].sm_mhz = \
                        err, mj, mw, mhz
                    k += 1
            return 0
        except BaseException as e:  # a ctypes callback cannot raise: _after_call raises it
            self._failure = self._failure or e
            return -10  # EERL_EIO

    def _lock_cb(self, _ctx, gpus, n, mhz):
        """The runtime puts a pool at a clock: sent with the next command to the nodes."""
        self._pending.append(([gpus[i] for i in range(n)], mhz))
        return 0

    def _restore_cb(self, _ctx):
        """The runtime restores every clock (close): every node releases its GPUs (eerld puts
        them back to the governor) and closes its eerld connection."""
        self._pending = []
        if self._released:
            return 0
        self._released = True
        try:
            self._release(self.nodes)
            return 0
        except BaseException as e:
            self._failure = self._failure or e
            self._owner_err = str(e).encode(errors="replace")
            return -10  # EERL_EIO

    def _owner_error_cb(self, _ctx):
        return self._owner_err

    def _release(self, nodes):
        if nodes:
            self.adapter.call("close", {m: {"release": not self.observe_only} for m in nodes})

    def _free_device(self):
        if self._leased and not self._released:
            self._released = True
            try:  # the runtime never started, so its restore did not release the nodes
                self._release(self.nodes)
            except EerlError:
                pass  # each node's eerld resets its GPUs as its connection closes
        self._leased = False
        if self._dev is not None:
            _dev_c()["free"](self._dev)
            self._dev = None

    def _forget_device(self):
        pass

    # ---- a node's failure stops the session ------------------------------------------------------

    def _after_call(self, at):
        """After every runtime call: a node's failure inside it stops the session (or, at the
        session's close, is raised); clock changes made after the boundary go out now."""
        e, self._failure = self._failure, None
        if e is not None:
            if not isinstance(e, NodeError):
                raise e
            if self._rt is None:
                raise e
            self._stop(e, at)
        if self._pending and self._rt is not None:
            # sent without waiting where the adapter can (post): the next command takes the
            # answers, so the call returns after one round trip, not two
            sets, self._pending = self._sets(self._pending), []
            send = getattr(self.adapter, "post", None) or self.adapter.call
            try:
                send("step", {m: {"gpus": [], "before": s} for m, s in sets.items()})
            except NodeError as e2:
                self._stop(e2, at)

    def _stop(self, e, at):
        """A node failed or was lost mid-run: the session cannot account for the allocation's
        energy any more, so it stops. Every other node is released (eerld puts its GPUs back to
        the governor); the failed node's eerld resets its GPUs when the connection drops (a
        lost node) or when we close it (a node that answered with an error); the runtime ends
        the trace with a line saying which node and why, after the updates it already has;
        then NodeLost (or NodeError) is raised naming the node."""
        lost = isinstance(e, NodeLost)
        n = e.node
        gone = getattr(self.adapter, "lost", ())
        released, failed = [], []
        for m in self.nodes:  # one by one: each node's outcome is its own
            if m in gone or (lost and m == n):
                continue
            try:
                self._release([m])
                released.append(m)
            except NodeError as e2:
                failed.append("%s (%s)" % (self.adapter.describe(m), e2.why))
        release_error = "; ".join(failed) or None
        parts = [getattr(self.adapter, "lost_note", _Adapter.lost_note)] if lost else []
        if released:
            parts.append("node%s %s %s back at the governor" % (
                "s" if len(released) > 1 else "", ", ".join(map(str, released)),
                "are" if len(released) > 1 else "is"))
        if failed:
            parts.append("releasing failed on %s, whose eerld resets its GPUs when the "
                         "connection closes or when it starts again" % release_error)
        msg = "%s %s in update %d, at %s: %s. The session stopped: %s; the trace keeps %s" % (
            self.adapter.describe(n), "was lost" if lost else "failed", self._update, at,
            e.why, "; ".join(parts) or "no node to release",
            "updates 1-%d" % (self._update - 1) if self._update > 1 else "no update")
        # the phases open when the node failed: a phase whose end failed is still open
        open_ = {k for k, _, _ in self._open_phases}
        detail = {"node": n, "name": self.adapter.describe(n), "at": at,
                  "open_phases": [k for k in T.PHASES if k in open_], "why": e.why,
                  "action": "stopped", "released": released, "release_error": release_error}
        self._stopped = msg
        self._closed = True
        self._released = True  # above: the runtime's restore has nothing left to do
        with _live_lock:
            _live.discard(self)
        rc = _c()["rt_abort"](self._rt, b"node_lost" if lost else b"node_error",
                              json.dumps(detail).encode())
        if rc < 0:  # the session stops all the same; the message says what the trace lacks
            msg += "; the trace could not be ended with its %s line: %s" % (
                "node_lost" if lost else "node_error",
                (_c()["rt_last_error"](self._rt) or b"").decode(errors="replace"))
            self._stopped = msg
        _c()["rt_free"](self._rt)
        self._rt = None
        self._free_device()
        err = NodeLost(n, e.why) if lost else NodeError(n, e.code, e.why)
        err.message = msg
        err.args = (msg,)
        raise err from e

    def _require_open(self):
        if self._stopped:
            raise EerlError(-15, "the multi-node session is closed (it stopped: %s)"
                            % self._stopped)
        _RuntimeSession._require_open(self)

    def metrics(self):
        m = _RuntimeSession.metrics(self)
        m["eerl/nodes"] = len(self.nodes)
        return m

    def __repr__(self):
        return "<eerl.multinode.MultiNodeSession %s on %d nodes%s>" % (
            self.mode, len(self.nodes), " closed" if self._closed else "")
