"""EerlCallback: eerl in a TRL job by one line (docs/integrations/trl.md),

    trainer = GRPOTrainer(..., callbacks=[EerlCallback()])      # or AsyncGRPOTrainer

in every process of the job. It does what the explicit form (trl.install, a Session, the
multi-node adapter) needs a user to write: the job's one session in global rank 0, its pools
from the GPUs the job's processes use (gathered over the job's torch.distributed group) and,
with a vLLM server, the server's GPUs (from its /server_info, or named once by the user), the
mode from the trainer, a MultiNodeSession when the job spans several hosts, and every clock
back to the governor at on_train_end and on every way out of trainer.train().

A TrainerCallback is made before its trainer and is given the trainer's parts, not the trainer,
in its events. The trainer is the object whose callback_handler holds this callback, found in
the callers' frames: at on_init_end (the end of Trainer.__init__), where the callback wraps
trainer.train on the instance, so that the session opens before train() runs (and before TRL's
own on_train_begin work: AsyncGRPOTrainer's first weight sync) and closes however train()
ends; or, for a callback added later with trainer.add_callback, at on_train_begin.

Owns, in global rank 0, the session and the hook it installs (and, across nodes, the adapter);
on a node's local rank 0 elsewhere, the thread that serves the session. Closes them at
on_train_end and when train() returns or raises.
"""

import functools
import os
import sys
import threading
import warnings

from . import _placement as P
from . import _common
from ._common import IntegrationError
from ._trl_hook import check, framework, is_async, make_hook
from .. import options as _options

NODE_TIMEOUT_S = 7200.0  # a node leader waits this long in serve() for the next command


def _find_trainer(cb):
    """The object in the callers' frames whose callback_handler holds cb (the trainer)."""
    f = sys._getframe(1)
    while f is not None:
        obj = f.f_locals.get("self")
        handler = getattr(obj, "callback_handler", None)
        if handler is not None and any(c is cb for c in getattr(handler, "callbacks", ())):
            return obj
        f = f.f_back
    return None


def _check_pools(pools):
    if pools is None:
        return None
    if not isinstance(pools, dict) or set(pools) - {"generation", "training"} or not pools:
        raise ValueError("EerlCallback: pools=%r: give {'generation': [gpu, ...], 'training': "
                         "[gpu, ...]} (NVML indices or UUIDs)" % (pools,))
    return {k: list(v) for k, v in pools.items()}


def _server_url(trainer):
    a = trainer.args
    url = getattr(a, "vllm_server_base_url", None)
    if url:
        return url
    return "http://%s:%s" % (getattr(a, "vllm_server_host", "localhost"),
                             getattr(a, "vllm_server_port", 8000))


def mode_of(trainer):
    """eerl's mode for what the trainer runs: AsyncGRPOTrainer (generation on a vLLM server
    goes on while training consumes; each weight sync pauses it) "inflight"; GRPOTrainer with
    vllm_mode="server" "disaggregated"; any other generation (transformers, continuous
    batching, vllm_mode="colocate") "colocated"."""
    if is_async(trainer):
        return "inflight"
    a = trainer.args
    if getattr(a, "use_vllm", False) and getattr(a, "vllm_mode", None) == "server":
        return "disaggregated"
    return "colocated"


class _Callback:
    """eerl in a TRL job by one line: GRPOTrainer(..., callbacks=[EerlCallback()]) (or
    AsyncGRPOTrainer), in every process (docs/integrations/trl.md).

    pools: {"generation": [...], "training": [...]}, NVML indices or UUIDs, in place of the
        pools found (each must be a GPU of the node that the job uses, where that is known).
    vllm_server_gpus: the vLLM server's GPUs (NVML indices or UUIDs), where they cannot be
        found from the server (the error says why).
    strict, phases: as eerl.integrations.trl.install().
    **session: keyword arguments of eerl.Session: trace=, observe_only=, allowed_loss=,
        strategy=, run_info=, resume_from=, eerld=, ... (mode and pools come from the job).
        Across nodes each is MultiNodeSession's, but for _common.SINGLE_NODE_ONLY (eerld=,
        meter_interval_ms=), refused by name: at construction where the launcher's environment
        says the job spans nodes, else when train() begins, before any lease.

    In global rank 0, once train() has begun: session, hook, mode, pools, pools_from (how the
    pools were found, in words; also in the trace's run line)."""

    def __init__(self, pools=None, vllm_server_gpus=None, strict=False, phases=None, **session):
        allowed = _common.session_keywords()
        bad = sorted(set(session) - set(allowed))
        if bad:
            raise TypeError("EerlCallback: %s: %s (it takes pools=, vllm_server_gpus=, strict=, "
                            "phases= and eerl.Session's %s)"
                            % (", ".join(bad), "the mode comes from the trainer" if bad == [
                                "mode"] else "no such keyword", ", ".join(allowed)))
        _options.check_keywords(session, "EerlCallback")  # before any device or node
        if _common.spans_nodes_by_env():
            err = _common.single_node_only(session, "the job (WORLD_SIZE %s, LOCAL_WORLD_SIZE "
                                           "%s)" % (os.environ["WORLD_SIZE"],
                                                    os.environ["LOCAL_WORLD_SIZE"]))
            if err is not None:
                raise err
        self._pools = _check_pools(pools)
        self._server = None if vllm_server_gpus is None else list(vllm_server_gpus)
        self._strict = bool(strict)
        self._phases = phases
        self._kw = session
        self.trainer = None
        self.session = self.hook = self.mode = self.pools = self.pools_from = None
        self._live = False
        self._observe_forced = False  # the job uses no GPU and eerl reaches real ones
        self._adapter = self._server_thread = None

    # ---- transformers' events ---------------------------------------------------------------

    def on_init_end(self, args, state, control, **kwargs):
        t = _find_trainer(self)
        if t is not None and self.trainer is None:
            self.trainer = t
            self._wrap_train(t)

    def on_train_begin(self, args, state, control, **kwargs):
        if not self._live:  # added with add_callback after the trainer was made
            t = self.trainer or _find_trainer(self)
            if t is None:
                raise IntegrationError("eerl: EerlCallback found no Trainer whose callback_handler "
                                       "holds it in the frames that called on_train_begin: give "
                                       "it to the trainer (callbacks=[...] or add_callback)")
            self.trainer = t
            self._setup(t)
        if self.hook is not None:
            self.hook.train_begin(kwargs)

    def on_step_begin(self, args, state, control, **kwargs):
        if self.hook is not None:
            self.hook.step_begin()

    def on_step_end(self, args, state, control, **kwargs):
        if self.hook is not None:
            self.hook.step_end()

    def on_train_end(self, args, state, control, **kwargs):
        self._finish()

    # ---- set up and tear down ---------------------------------------------------------------

    def _wrap_train(self, trainer):
        orig = trainer.train
        cb = self

        @functools.wraps(orig)
        def train(*args, **kwargs):
            cb._setup(trainer)
            try:
                return orig(*args, **kwargs)
            finally:
                cb._finish()

        trainer.train = train

    def _setup(self, trainer):
        """Every process: checks the trainer, gathers where the processes run; global rank 0
        opens the session and hooks the trainer, and every process learns whether it could."""
        if self._live:
            return
        fw = framework()
        check(trainer, fw)
        acc = trainer.accelerator
        recs = P.gather(P.job_record(acc.device, acc.local_process_index))
        self._live = True
        if sum(r["local"] == 0 for r in recs) > 1:  # one local rank 0 per node
            return self._setup_nodes(trainer, recs, fw)
        err = None
        if acc.is_main_process:
            try:
                self._open(trainer, recs, fw)
            except Exception as e:
                err = e
        self._agree(err, trainer)

    def _agree(self, err, trainer):
        """Collective: every process learns whether global rank 0 opened the session (err: its
        exception there), and stops with it if not, so that no process waits for the others in
        training's first collective."""
        outcome = P.broadcast(None if err is None else "%s: %s" % (type(err).__name__, err))
        if outcome is not None:
            self._finish()
            if err is not None:
                raise err
            raise IntegrationError("eerl: global rank 0 could not open the job's session, so "
                                   "this process stops too: %s" % outcome)
        # Last in the handler's list: TRL's own callbacks (AsyncGRPOTrainer's weight sync at
        # on_step_end) run before this one's update end, as with install().
        cbs = trainer.callback_handler.callbacks
        if any(c is self for c in cbs):
            cbs[:] = [c for c in cbs if c is not self] + [self]

    def _open(self, trainer, recs, fw):
        import eerl
        self.mode = mode_of(trainer)
        eerld = self._kw.get("eerld")
        node, where = P.node_gpus(eerld)
        self._observe_forced = False
        self.pools, self.pools_from = self._find_pools(trainer, recs, node, where)
        info = {"framework": str(fw), "pools_from": self.pools_from}
        info.update(self._kw.get("run_info") or {})
        kw = dict(self._kw, run_info=info)
        if self._observe_forced:
            kw["observe_only"] = True
        self.session = eerl.Session(mode=self.mode, pools=self.pools, **kw)
        try:
            self.hook = make_hook(self.session, trainer, self._phases, self._strict,
                                  check(trainer, fw), fw, callback=False)
        except BaseException:
            self.session.close()
            self.session = None
            raise

    def _finish(self):
        hook, self.hook = self.hook, None
        session, self.session = self.session, None
        ad, self._adapter = self._adapter, None
        thread, self._server_thread = self._server_thread, None
        self._live = False
        try:
            if hook is not None:
                hook.uninstall()
        finally:
            try:
                if session is not None:
                    said = session.close()  # every clock back to the governor
                    if said is not None:  # global rank 0 only: what eerl did on the run
                        print(said.line, flush=True)
            finally:
                if ad is not None:
                    ad.close()  # the other nodes' serving threads return
                if thread is not None:
                    thread.join()

    # ---- pools --------------------------------------------------------------------------------

    def _job_gpus(self, recs, node, where):
        with_gpu = [r for r in recs if r["gpus"]]
        if not with_gpu:
            return None
        if len(with_gpu) != len(recs):
            r = [r for r in recs if not r["gpus"]][0]
            raise ValueError("eerl: rank %s (pid %s) uses no GPU (%s) while rank %s uses %s: "
                             "give EerlCallback(pools=...)" % (r["rank"], r["pid"], r["why"],
                                                               with_gpu[0]["rank"],
                                                               with_gpu[0]["gpus"][0]))
        out = set()
        for r in recs:
            out.update(P.find(r["gpus"], node, where, "rank %s (pid %s, %s)"
                              % (r["rank"], r["pid"], r["why"])))
        return sorted(out)

    def _server_gpus(self, trainer, node, where):
        if self._server is not None:
            return P.find(self._server, node, where, "vllm_server_gpus"), None
        url = _server_url(trainer)
        try:
            return P.server_gpus(P.vllm_server(url), node)
        except (OSError, ValueError) as e:
            return None, "the vLLM server at %s could not be asked: %s" % (url, e)

    def _find_pools(self, trainer, recs, node, where):
        """(pools, how they were found, in words)."""
        job = self._job_gpus(recs, node, where)
        split = self.mode != "colocated"
        server, why = self._server_gpus(trainer, node, where) if split else (None, None)
        if self._pools is not None:
            return self._given_pools(job, server, node, where), "given (pools=)"
        if job is not None:
            if not split:
                return {"generation": job, "training": job}, "the job's GPUs (%s)" % where
            if server is None:
                raise ValueError("eerl: mode %s needs the vLLM server's GPUs for the generation "
                                 "pool, and %s. Name them once: EerlCallback(vllm_server_gpus="
                                 "[...]) (NVML indices or UUIDs)" % (self.mode, why))
            both = sorted(set(server) & set(job))
            if both:
                raise ValueError("eerl: the vLLM server's GPUs %s are also the trainer's (%s): "
                                 "mode %s needs them apart" % (server, job, self.mode))
            return ({"generation": server, "training": job},
                    "the job's and the vLLM server's GPUs (%s)" % where)
        return self._without_cuda(recs, node, where, server, why)

    def _without_cuda(self, recs, node, where, server, why):
        every = [d["gpu"] for d in node]
        if not every:
            raise ValueError("eerl: no GPU to meter: the job's processes use none (%s) and %s "
                             "has none; start eerld over GPUs (eerld --devices twin to try "
                             "it), or give EerlCallback(pools=...)" % (recs[0]["why"], where))
        if self.mode == "colocated":
            pools = {"generation": every, "training": every}
        elif server is not None:
            pools = {"generation": server, "training": [g for g in every if g not in server]}
        else:
            if len(every) < 2:
                raise ValueError("eerl: mode %s needs two GPUs apart, and %s has one (%s)"
                                 % (self.mode, where, why))
            half = len(every) // 2
            pools = {"generation": every[half:], "training": every[:half]}
        if not pools["training"]:
            raise ValueError("eerl: no GPU of %s is left for training beside the vLLM server's "
                             "%s" % (where, server))
        split = "" if self.mode == "colocated" else (
            ", the vLLM server's as generation" if server is not None else
            ", the last %d as generation (%s)" % (len(pools["generation"]), why))
        if P.is_twin(node):
            how = ("no process of the job uses a CUDA device (%s): eerl takes the GPUs of %s%s"
                   % (recs[0]["why"], where, split))
            warnings.warn("eerl: %s: generation %s, training %s" % (
                how, pools["generation"], pools["training"]), UserWarning, stacklevel=2)
            return pools, how
        # Real GPUs the job does not use (other users' jobs may): observed, never controlled.
        self._observe_forced = True
        how = ("no process of the job uses a CUDA device (%s), and the GPUs of %s are real "
               "GPUs, not eerld --devices twin's: eerl only observes them (observe-only: no "
               "lease, no clock changed)%s" % (recs[0]["why"], where, split))
        warnings.warn("eerl: %s: generation %s, training %s. To control clocks, name the GPUs "
                      "the job uses: EerlCallback(pools={'generation': [...], 'training': "
                      "[...]}) (NVML indices or UUIDs)" % (
                          how, pools["generation"], pools["training"]),
                      UserWarning, stacklevel=2)
        return pools, how

    def _given_pools(self, job, server, node, where):
        out = {}
        for role, ids in self._pools.items():
            out[role] = P.find(ids, node, where, "pools[%r]" % role)
            used = set(job or ()) | (set(server or ()) if role == "generation" else set())
            if job is not None:
                extra = [g for g in out[role] if g not in used]
                if extra:
                    raise ValueError("eerl: pools[%r] has GPU %s, which the job does not use "
                                     "(its processes use %s%s)" % (
                                         role, extra[0], job, "" if server is None else
                                         ", its vLLM server %s" % server))
        return out

    # ---- several nodes ------------------------------------------------------------------------

    def _setup_nodes(self, trainer, recs, fw):
        """The documented lines of docs/integrations/trl.md for several nodes, in every
        process: one MultiNodeSession in global rank 0, each node's local rank 0 serving it."""
        import datetime
        from .. import multinode
        acc = trainer.accelerator
        n_nodes = sum(r["local"] == 0 for r in recs)
        err = _common.single_node_only(self._kw, "the job (%d nodes)" % n_nodes)
        if err is not None:  # every process raises it: each has every record
            raise err
        kw = {k: v for k, v in self._kw.items() if k in _common.multinode_keywords()}
        self.mode = mode_of(trainer)
        if self.mode != "colocated":
            raise IntegrationError(
                "eerl: a job across %d nodes with a vLLM server (mode %s) is not supported yet: "
                "the server's processes are not ranks of the job, so their GPUs cannot be "
                "reached (docs/integrations/trl.md)" % (sum(r["local"] == 0 for r in recs),
                                                        self.mode))
        leaders = multinode.node_leaders(timeout=datetime.timedelta(seconds=NODE_TIMEOUT_S))
        err = None
        if acc.local_process_index == 0:
            ad = self._adapter = multinode.TorchDistributedAdapter(group=leaders)
            if ad.is_driver:
                try:
                    pools = ad.locate({"generation": recs, "training": recs})
                    self.pools, self.pools_from = pools, "the job's GPUs on %d nodes" % len(
                        pools["training"])
                    info = {"framework": str(fw), "pools_from": self.pools_from}
                    info.update(self._kw.get("run_info") or {})
                    self.session = multinode.MultiNodeSession(
                        ad, mode=self.mode, pools=pools, **dict(kw, run_info=info))
                    self.hook = make_hook(self.session, trainer, self._phases,
                                          self._strict, check(trainer, fw), fw, callback=False)
                except Exception as e:
                    err = e
            else:
                self._adapter = None
                self._server_thread = threading.Thread(target=ad.serve, name="eerl-node",
                                                       daemon=True)
                self._server_thread.start()
        self._agree(err, trainer)


def callback_class():
    """EerlCallback, a transformers.TrainerCallback."""
    from transformers import TrainerCallback

    class EerlCallback(_Callback, TrainerCallback):
        __doc__ = _Callback.__doc__

    EerlCallback.__module__ = "eerl.integrations.trl"
    EerlCallback.__qualname__ = "EerlCallback"
    return EerlCallback

