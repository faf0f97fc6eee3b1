"""MultiNodeSession: eerl.Session's runtime (src/runtime, the same C session) over the GPUs of
every node, which it reads and whose clocks it sets through an adapter.

The runtime sees the pools' GPUs as one remote device (eerl_device_open_remote), whose read
sends one command to every node at once; its clock owner queues the clock changes that command
carries. Here: checking the pools and each node's eerld at the start, the remote device and the
clock owner, and stopping the session when a node fails or is lost. The adapters carry the
commands and import nothing from this module.
"""

import ctypes as C
import json
import os
import re

from .. import _lib
from .. import _types as T
from .. import options
from .._lib import EerlError
from ..session import (_U32_MAX, _RuntimeSession, _c, _install_sigterm, _live, _live_lock,
                       _ranged_int)
from ._adapters import NodeError, NodeLost, _Adapter


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


def _fill_reading(out, row):
    """One GPU's reading of a node's step answer into the remote device's eerl_device_reading.
    A row of four (a node that reads no GPU state) leaves the reasons and the limit unread,
    which the meter reports as not read, never as no slowdown."""
    out.err, out.energy_mj, out.power_mw, out.sm_mhz = row[:4]
    if len(row) >= 7:
        out.has_reasons = 1 if row[4] else 0
        out.reasons, out.limit_mw = row[5] if row[4] else 0, row[6]


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
                for r in rows:
                    _fill_reading(ret[k], r)
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

