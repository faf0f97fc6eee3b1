"""Many nodes through the framework's own engine (docs/python.md, "Several nodes").

The controller runs once, in the driver (MultiNodeSession). Every node runs eerld, which owns that
node's clocks. The driver reaches the nodes through an adapter over the engine the framework
already runs, never a network protocol of eerl's own:

  RayAdapter               one Ray actor per node, placed on it with NodeAffinitySchedulingStrategy,
                           relaying to that node's eerld socket;
  TorchDistributedAdapter  one rank per node (e.g. each node's local rank 0) in a
                           torch.distributed group; the driver broadcasts a command, every node
                           rank runs it against its eerld and the results are gathered back.

Both carry the same few commands to a NodeServer on each node (hello, lease, set a phase, read the
energy counters, close). At every phase boundary the driver sends one command to all nodes that
switches the pools' clocks and reads every GPU's energy counter in the same round trip, so an
update's energy is the sum over nodes of counter differences, and a phase's energy is the
allocation's energy between its boundaries.

MultiNodeSession has the Session interface (phase_begin/phase_end/phase(), update_end, metrics,
status, close) for the synchronous modes (colocated, disaggregated); it builds the observation
itself from the boundary readings and feeds the C controller (eerl_ctl_*), and writes a trace in
eerl's trace format (docs/trace-format.md) that `eerl replay` checks. Closing it (or collecting
it, or the process exiting) releases every lease; eerld resets those GPUs.
"""

import atexit
import ctypes as C
import json
import math
import time
import weakref

from . import _lib
from . import _types as T
from ._lib import EerlError

# ---- the node side -------------------------------------------------------------------------------


class NodeServer:
    """Runs on one node: executes the driver's commands against that node's eerld."""

    def __init__(self, socket=None):
        self.socket = socket
        self.agent = None
        self.pools = {}

    def _agent(self):
        if self.agent is None:
            from .agent import Agent
            self.agent = Agent(self.socket, name="eerl-multinode")
        return self.agent

    def handle(self, cmd, args):
        """Returns ("ok", result) or ("err", code, message): errors travel back as values so a
        failing node never leaves the collective half-done."""
        try:
            return ("ok", getattr(self, "cmd_" + cmd)(**(args or {})))
        except EerlError as e:
            return ("err", e.code, str(e))
        except Exception as e:  # a bug or a bad argument on the node: still report it
            return ("err", -1, "%s: %s" % (type(e).__name__, e))

    def cmd_hello(self, gpus):
        a = self._agent()
        info = a.info()
        clocks = a.supported_clocks(gpus[0]) if gpus else []
        return {"info": info, "clocks": clocks}

    def cmd_lease(self, gpus):
        self._agent().lease(gpus)

    def cmd_define(self, pools):
        """pools: {name: [gpus, gen_mhz, train_mhz, idle_mhz]}."""
        for name, (gpus, g, t, i) in pools.items():
            self._agent().define_pool(name, gpus, g, t, i)
            self.pools[name] = gpus

    def cmd_step(self, gpus, phases=None, define=None):
        """Optionally redefines pools, switches pools to phases ({name: phase}), then reads the
        energy counters of gpus: [energy_mj per gpu], [sm_mhz per gpu]."""
        if define:
            self.cmd_define(define)
        for name, phase in (phases or {}).items():
            self._agent().set_phase(name, phase)
        r = self._agent().read(gpus) if gpus else []
        return [x[0] for x in r], [x[2] for x in r]

    def cmd_close(self, release=True):
        if self.agent is not None:
            try:
                if release:
                    self.agent.release(())
            finally:
                self.agent.close()
                self.agent = None


# ---- adapters ------------------------------------------------------------------------------------


class NodeError(EerlError):
    """A node failed a command. node: which one."""

    def __init__(self, node, code, text):
        Exception.__init__(self, "node %s: %s" % (node, text))
        self.node, self.code, self.message = node, code, text
        self.name = _lib.err_name(code) if code < 0 else "EERL_UNKNOWN"
        self.what, self.detail = "", ""


def _unwrap(nodes, results):
    out = {}
    for n, r in zip(nodes, results):
        if r[0] != "ok":
            raise NodeError(n, r[1], r[2])
        out[n] = r[1]
    return out


class TorchDistributedAdapter:
    """Driver and node ranks of a torch.distributed group. Node k is the k-th rank of the group
    (one rank per node: pass a group of the nodes' local rank 0). The driver is the group's rank
    driver (default 0) and serves its own node too. Every other node rank calls serve(), which
    returns when the driver closes the adapter."""

    def __init__(self, group=None, driver=0, socket=None, dist=None):
        if dist is None:
            import torch.distributed as dist
        self.dist = dist
        self.group = group
        self.driver = driver
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.nodes = list(range(self.world))
        self.server = NodeServer(socket)
        self._global_driver = (dist.get_global_rank(group, driver)
                               if group is not None and hasattr(dist, "get_global_rank")
                               else driver)

    @property
    def is_driver(self):
        return self.rank == self.driver

    def _round(self, msg):
        box = [msg]
        self.dist.broadcast_object_list(box, src=self._global_driver, group=self.group)
        cmd, per_node = box[0]
        if cmd == "__stop__":
            return None, True
        args = per_node.get(self.rank) if isinstance(per_node, dict) else per_node
        mine = self.server.handle(cmd, args) if args is not None else ("ok", None)
        gathered = [None] * self.world if self.is_driver else None
        self.dist.gather_object(mine, gathered, dst=self._global_driver, group=self.group)
        return gathered, False

    def call(self, cmd, per_node):
        """Runs cmd on the nodes named in per_node ({node: kwargs}); returns {node: result}."""
        if not self.is_driver:
            raise RuntimeError("only the driver rank calls nodes; node ranks call serve()")
        gathered, _ = self._round((cmd, dict(per_node)))
        nodes = sorted(per_node)
        return _unwrap(nodes, [gathered[n] for n in nodes])

    def serve(self):
        """Node ranks: run the driver's commands until it closes the adapter."""
        if self.is_driver:
            raise RuntimeError("the driver rank does not serve")
        while True:
            _, stop = self._round(None)
            if stop:
                self.server.cmd_close()
                return

    def close(self):
        if self.is_driver:
            self.server.cmd_close()
            box = [("__stop__", None)]
            self.dist.broadcast_object_list(box, src=self._global_driver, group=self.group)


class RayAdapter:
    """One Ray actor per node (NodeAffinitySchedulingStrategy, soft=False), each relaying to its
    node's eerld. nodes: Ray node ids (default: every alive node with a GPU resource). sockets:
    {node_id: eerld socket path} where a node's eerld is not at the default socket."""

    def __init__(self, nodes=None, sockets=None, ray=None):
        if ray is None:
            import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        self.ray = ray
        if nodes is None:
            nodes = [n["NodeID"] for n in ray.nodes()
                     if n.get("Alive") and n.get("Resources", {}).get("GPU", 0) > 0]
        if not nodes:
            raise RuntimeError("RayAdapter: no alive Ray node with a GPU")
        self.node_ids = list(nodes)
        self.nodes = list(range(len(self.node_ids)))
        actor_cls = ray.remote(num_cpus=0)(NodeServer)
        sockets = sockets or {}
        self.actors = [
            actor_cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                node_id=nid, soft=False)).remote(sockets.get(nid))
            for nid in self.node_ids]

    def call(self, cmd, per_node):
        nodes = sorted(per_node)
        refs = [self.actors[n].handle.remote(cmd, per_node[n]) for n in nodes]
        return _unwrap(nodes, self.ray.get(refs))

    def close(self):
        try:
            self.ray.get([a.handle.remote("close", None) for a in self.actors])
        finally:
            for a in self.actors:
                self.ray.kill(a)
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
            "config_default": d("eerl_ctl_config_default", I, [I, C.POINTER(T.CtlConfig)]),
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


class MultiNodeSession:
    """The controller in the driver, clocks and energy on every node through adapter.

    pools: {"generation": {node: [gpu, ...]}, "training": {node: [gpu, ...]}} (or lists of
    (node, gpu) pairs). Colocated: the same GPUs in both; disaggregated: disjoint."""

    GEN, TRAIN = "eerl-gen", "eerl-train"

    def __init__(self, adapter, mode="colocated", pools=None, allowed_loss=0.02,
                 observe_only=False, trace=None, clock=time.monotonic):
        self._ctl_h = None
        self._closed = True
        self._trace = None
        if mode not in ("colocated", "disaggregated"):
            raise ValueError("MultiNodeSession mode %r: colocated or disaggregated (the "
                             "asynchronous modes run in one eerl.Session per job)" % (mode,))
        if not pools or set(pools) != {"generation", "training"}:
            raise ValueError("pools needs 'generation' and 'training', got %r" % (pools,))
        gen, train = _norm_pool(pools["generation"], "generation"), \
            _norm_pool(pools["training"], "training")
        if mode == "colocated":
            if gen != train:
                raise ValueError("colocated: both pools must be the same GPUs, got %r and %r"
                                 % (gen, train))
        else:
            both = [(n, g) for n in gen for g in gen[n] if g in train.get(n, [])]
            if both:
                raise ValueError("disaggregated: GPU %d of node %d is in both pools" % both[0][::-1])
        unknown = sorted((set(gen) | set(train)) - set(adapter.nodes))
        if unknown:
            raise ValueError("node %d is not one of the adapter's nodes %s"
                             % (unknown[0], adapter.nodes))
        self.adapter = adapter
        self.mode = mode
        self.observe_only = bool(observe_only)
        self.gen, self.train = gen, train
        self.nodes = sorted(set(gen) | set(train))
        self.all_gpus = {n: sorted(set(gen.get(n, [])) | set(train.get(n, []))) for n in self.nodes}
        self.clock = clock
        f = _ctl_fns()

        hello = adapter.call("hello", {n: {"gpus": self.all_gpus[n]} for n in self.nodes})
        clocks = hello[self.nodes[0]]["clocks"]
        if not clocks:
            raise EerlError(-6, "node %d reported no supported clocks" % self.nodes[0])
        self.peak = max(clocks)
        cfg = T.CtlConfig()
        _lib.check(f["config_default"](T.MODES[mode], C.byref(cfg)), "controller defaults")
        cfg.allowed_loss = float(allowed_loss)
        arr = (C.c_uint * len(clocks))(*clocks)
        h = C.c_void_p()
        _lib.check(f["new"](T.MODES[mode], C.byref(cfg), arr, len(clocks), self.peak,
                            C.byref(h)), "building the controller (allowed loss %g)"
                   % allowed_loss)
        self._ctl_h = h
        self.allowed_loss = float(allowed_loss)
        self.clocks = sorted(set(clocks), reverse=True)
        self._pool_state = {}  # eerld pool -> the phase it was last switched to
        self.applied = T.Setting()  # governor until the controller says otherwise
        f["setting"](h, C.byref(self.applied))
        self._pending_define = True
        try:
            if not self.observe_only:
                adapter.call("lease", {n: {"gpus": self.all_gpus[n]} for n in self.nodes})
            if trace is not None:
                self._trace = open(trace, "w")
                self._write({"type": "header", "format": "eerl-trace", "version": 1,
                             "producer": "eerl %s python multinode" % _lib.__version__,
                             "mode": mode, "strategy": "paper", "governor_peak_mhz": self.peak,
                             "clocks_mhz": self.clocks,
                             "config": {"allowed_loss": self.allowed_loss}})
                self._write({"type": "run", "nodes": len(self.nodes),
                             "pools": {"generation": {str(k): v for k, v in gen.items()},
                                       "training": {str(k): v for k, v in train.items()}},
                             "observe_only": self.observe_only})
        except BaseException:
            self._teardown()
            raise
        self._closed = False
        self._open = {}  # phase -> (t0, energy snapshot)
        self._phase_time = [0.0] * 5
        self._phase_energy = [0.0] * 5
        self._t_update0 = None
        self._e_update0 = None
        self._update = 0
        self._last = None
        self.last_sm_mhz = {}
        _live.add(self)

    # ---- plumbing -------------------------------------------------------------------------------

    def _write(self, obj):
        self._trace.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._trace.flush()

    def _define_args(self):
        s = self.applied
        g, t, i = s.mhz[0], s.mhz[1], s.idle_mhz
        out = {}
        for n in self.nodes:
            d = {}
            if self.mode == "colocated":
                d[self.GEN] = [self.gen[n], g, t, 0]
            else:
                if n in self.gen:
                    d[self.GEN] = [self.gen[n], g, g, i]
                if n in self.train:
                    d[self.TRAIN] = [self.train[n], t, t, i]
            out[n] = d
        return out

    def _step(self, phases_by_pool):
        """One round trip: (re)define pools if the setting changed, switch pools, read every
        GPU. Returns (time, {node: [energy_mj]})."""
        per = {}
        define = self._define_args() if self._pending_define and not self.observe_only else None
        if define:
            # a redefined pool must be put back in the phase it is in (eerld applies a pool's
            # clocks when it is switched), then take this boundary's switches
            phases_by_pool = dict(self._pool_state, **phases_by_pool)
        self._pool_state.update(phases_by_pool)
        for n in self.nodes:
            args = {"gpus": self.all_gpus[n]}
            if not self.observe_only:
                ph = {}
                for pool, phase in phases_by_pool.items():
                    if (pool == self.GEN and n in self.gen) or (pool == self.TRAIN and n in self.train):
                        ph[pool] = phase
                args["phases"] = ph
                if define:
                    args["define"] = define[n]
            per[n] = args
        res = self.adapter.call("step", per)
        t = self.clock()
        self._pending_define = False
        energies = {n: res[n][0] for n in self.nodes}
        self.last_sm_mhz = {n: res[n][1] for n in self.nodes}
        return t, energies

    def _joules(self, e1, e0, pool=None):
        tot = 0
        for n in self.nodes:
            gpus = self.all_gpus[n]
            want = None if pool is None else set(pool.get(n, []))
            for i, g in enumerate(gpus):
                if want is None or g in want:
                    tot += e1[n][i] - e0[n][i]
        return tot / 1000.0

    def _agent_phases(self, key, begin):
        if self.mode == "colocated":
            if not begin:
                return {}
            return {self.GEN: "generation" if key == "generation" else "training"}
        pools = {"generation": [self.GEN], "logprob": [self.TRAIN], "training": [self.TRAIN],
                 "refit": [self.GEN, self.TRAIN], "other": []}[key]
        out = {}
        for p in pools:
            out[p] = ("generation" if p == self.GEN else "training") if begin else "idle"
        return out

    # ---- the Session interface ------------------------------------------------------------------

    def _require_open(self):
        if self._closed:
            raise EerlError(-15, "the multi-node session is closed")

    def phase_begin(self, name, pool=None):
        self._require_open()
        key, ph = T.phase_id(name)
        if key in self._open:
            raise EerlError(-15, "beginning phase %s" % key, "it is already open")
        t, e = self._step(self._agent_phases(key, True))
        if self._t_update0 is None:
            self._t_update0, self._e_update0 = t, e
        self._open[key] = (t, e)
        return key

    def phase_end(self, name, pool=None):
        self._require_open()
        key, ph = T.phase_id(name)
        if key not in self._open:
            raise EerlError(-15, "ending phase %s" % key, "it is not open")
        t, e = self._step(self._agent_phases(key, False))
        t0, e0 = self._open.pop(key)
        self._phase_time[ph] += t - t0
        self._phase_energy[ph] += self._joules(e, e0)

    def phase(self, name, pool=None):
        from .session import _Phase
        return _Phase(self, name, pool)

    def update_end(self, generated_tokens, valid_tokens, longest_response, policy_version=None,
                   update=None):
        self._require_open()
        if self._open:
            raise EerlError(-15, "ending update %d" % self._update,
                            "phase %s is still open" % ", ".join(self._open))
        if self._t_update0 is None:
            raise EerlError(-15, "ending update %d" % self._update, "no phase began")
        f = _ctl_fns()
        t, e = self._step({})
        o = T.Obs()
        o.update = self._update if update is None else int(update)
        o.gen_tokens = float(generated_tokens)
        o.valid_tokens = float(valid_tokens)
        o.longest_tokens = float(longest_response)
        o.policy_age = (o.update - int(policy_version)
                        if policy_version is not None and 0 <= int(policy_version) <= o.update
                        else -1)
        o.time_s = t - self._t_update0
        o.energy_j = self._joules(e, self._e_update0)
        for i in range(5):
            o.phase_time_s[i] = self._phase_time[i]
            o.phase_energy_j[i] = self._phase_energy[i]
        if self.mode == "disaggregated":
            o.pool_energy_j[0] = self._joules(e, self._e_update0, self.gen)
            o.pool_energy_j[1] = self._joules(e, self._e_update0, self.train)
            o.flags |= T.OBS_POOL_ENERGY
        o.setting = self.applied if not self.observe_only else T.Setting()
        req = T.Setting()
        f["setting"](self._ctl_h, C.byref(req))
        nxt = T.Setting()
        rc = f["observe"](self._ctl_h, C.byref(o), C.byref(nxt))
        evs = (T.Event * 256)()
        n_ev = f["events"](self._ctl_h, evs, 256)
        if self._trace is not None:
            self._write(self._update_line(o, req, evs, n_ev))
        if rc == 0 and not self.observe_only:
            if bytes(nxt) != bytes(self.applied):
                self.applied = nxt
                self._pending_define = True
        self._last = (o, rc == 0)
        self._update = o.update + 1
        self._t_update0, self._e_update0 = t, e
        self._phase_time = [0.0] * 5
        self._phase_energy = [0.0] * 5
        return self.metrics()

    def _update_line(self, o, req, evs, n_ev):
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
        if o.flags & T.OBS_POOL_ENERGY:
            line["pools"] = {"generation": {"energy_j": _num(o.pool_energy_j[0])},
                             "training": {"energy_j": _num(o.pool_energy_j[1])}}
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
