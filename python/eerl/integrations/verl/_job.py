"""The one-line entry's work (python -m eerl.integrations.verl.main_ppo, docs/integrations/verl.md).

In the driver (main()): verl's hook points are checked and eerl's options (+eerl.KEY=VALUE in
verl's own Hydra overrides) are read before Ray starts; then verl's own main runs, its run_ppo
given a TaskRunner class that is verl's with eerl on (task_runner()).

In verl's TaskRunner (a Ray actor; Job): the trainer classes' fit() is wrapped, so that when
verl's TaskRunner calls fit() on the trainer it built and initialised, eerl finds
  * the mode, from the trainer verl runs (mode_of()): the hybrid engine (v1 sync and
    colocate_async, the legacy trainer and the separation recipe) is "colocated"; rollout on GPUs
    of its own (v1 separate_async with actor_rollout_ref.hybrid_engine=False, one_step_off_policy)
    is "drained";
  * the pools, from where verl placed its workers: the training pool from the trainer's worker
    groups (actor, reference, critic), the generation pool from its rollout replicas (colocated:
    the same workers), each Ray worker asked for its GPUs (eerl.multinode.ray_worker_gpus);
  * the session: eerl.Session on the GPUs of this node when every worker is on the TaskRunner's
    node, else eerl.multinode.MultiNodeSession over a RayAdapter reaching the workers' nodes;
opens it, installs the hook (eerl.integrations.verl.install), runs verl's fit() and, however it
ends, uninstalls the hook and closes the session (every clock back to the governor).

Owns, in the TaskRunner process, for the length of one fit(): the session, the hook and (across
nodes) the adapter. Changes no clock before the session opens; refuses (IntegrationError or
ValueError naming the value) before it opens.
"""

import functools
import importlib
import inspect
import os
import sys

from .. import _common
from .._common import IntegrationError
from ... import options as _options
from . import RECIPES, TRAINERS, check, framework, install

# The +eerl.KEY options: eerl.Session's keywords (mode and pools come from verl; clock is a
# Python function), from the one table of _common, ...
SESSION_KEYS = tuple(k for k in _common.session_keywords() if k != "clock")
# ... those a session across nodes takes (all but _common.SINGLE_NODE_ONLY) ...
MULTINODE_KEYS = tuple(k for k in _common.multinode_keywords() if k != "clock")
# ... and the integration's own (pools: GPUs of the TaskRunner's node, in place of those found)
OWN_KEYS = ("pools", "strict", "phases", "log_metrics")
PATH_KEYS = ("trace", "resume_from", "prior")

MAIN_PPO = "verl.trainer.main_ppo"
# Where the trainer's workers are: its worker groups (each with .workers, Ray actor handles) ...
TRAIN_GROUPS = ("actor_rollout_wg", "actor_wg", "ref_policy_wg", "critic_wg")
# ... and its rollout servers (LLMServerManager: get_replicas(), each replica with .workers)
ROLLOUT_MANAGERS = ("standalone_server_manager", "llm_server_manager")
# Trainers whose rollout runs on GPUs of its own (eerl's drained mode; see mode_of)
SEPARATE_ROLLOUT = ("OneStepOffRayTrainer", "FullyAsyncTrainer")


def _keys():
    return ", ".join("+eerl.%s" % k for k in SESSION_KEYS + OWN_KEYS)


def options(config):
    """eerl's options in verl's configuration (its "eerl" key: +eerl.KEY=VALUE), checked, as
    {key: value}; trace and resume_from made absolute (verl's TaskRunner runs in a Ray worker,
    whose working directory is not the caller's). IntegrationError naming a key that is not one."""
    raw = config.get("eerl", None) if hasattr(config, "get") else None
    if raw is None:
        return {}
    from omegaconf import OmegaConf
    d = OmegaConf.to_container(raw, resolve=True) if OmegaConf.is_config(raw) else raw
    if not isinstance(d, dict):
        raise IntegrationError("eerl: +eerl=%r: give eerl's options one by one, as "
                               "+eerl.KEY=VALUE (%s)" % (d, _keys()))
    bad = sorted(set(d) - set(SESSION_KEYS) - set(OWN_KEYS))
    if bad:
        why = ("the mode comes from verl's configuration (the trainer it runs and "
               "actor_rollout_ref.hybrid_engine)" if bad[0] == "mode" else "eerl has no such "
               "option")
        raise IntegrationError("eerl: +eerl.%s: %s; the options are %s" % (bad[0], why, _keys()))
    for k in sorted(d):  # the table's checks, before the job starts anything
        _options.check_keywords({k: d[k]}, "eerl: +eerl.%s" % k)
    for k in PATH_KEYS:
        if d.get(k) is not None:
            d[k] = os.path.abspath(os.path.expanduser(str(d[k])))
    pools = d.get("pools")
    if pools is not None and (not isinstance(pools, dict) or not pools or
                              set(pools) - {"generation", "training"} or
                              not all(isinstance(v, list) and v for v in pools.values())):
        raise IntegrationError("eerl: +eerl.pools=%r: give +eerl.pools.generation=[GPU,...] "
                               "and/or +eerl.pools.training=[GPU,...] (NVML indices or UUIDs "
                               "of the GPUs the job uses)" % (pools,))
    return d


# ---- the mode and the pools, from what verl runs ----------------------------------------------


def mode_of(trainer):
    """(eerl's mode for the schedule trainer runs, the reason in words). IntegrationError for a
    schedule eerl has no mode for."""
    names = [c.__name__ for c in type(trainer).__mro__]
    kind = type(trainer).__name__
    if "PPOTrainerSeparateAsync" in names:
        if getattr(trainer, "_enable_hybrid_replicas", True):
            raise IntegrationError(
                "eerl: %s: verl's separate_async trainer with actor_rollout_ref.hybrid_engine="
                "True generates on the training GPUs (between steps) as well as on the rollout "
                "GPUs (throughout): eerl has no mode for a pool that does both. Set "
                "actor_rollout_ref.hybrid_engine=False (rollout on its own GPUs only: eerl's "
                "drained mode), or use the sync or colocate_async trainer. %s"
                % (framework(), framework()._known()), "verl", framework().version,
                ["actor_rollout_ref.hybrid_engine=False"])
        return "drained", "%s, rollout on GPUs of its own (hybrid_engine=False)" % kind
    if any(n in SEPARATE_ROLLOUT for n in names):
        return "drained", "%s, rollout on GPUs of its own" % kind
    return "colocated", "%s, rollout in the trainer's hybrid engine" % kind


def _handles(holders):
    """The Ray actor handles of holders' .workers, each once, in order."""
    out, seen = [], set()
    for h in holders:
        for w in list(getattr(h, "workers", None) or ()):
            key = getattr(w, "_actor_id", None) or id(w)
            if key not in seen:
                seen.add(key)
                out.append(w)
    return out


def worker_handles(trainer, mode):
    """(training workers, generation workers, where they were found, in words): Ray actor
    handles from the trainer's worker groups and rollout replicas. IntegrationError when verl's
    trainer holds none where eerl looks."""
    groups = [a for a in TRAIN_GROUPS if getattr(trainer, a, None) is not None]
    train = _handles(getattr(trainer, a) for a in groups)
    if not train:
        raise IntegrationError(
            "eerl: %s: the trainer (%s) holds no worker group with workers in %s: eerl cannot "
            "tell which GPUs it trains on. %s" % (framework(), type(trainer).__name__,
                                                  ", ".join(TRAIN_GROUPS), framework()._known()),
            "verl", framework().version, list(TRAIN_GROUPS))
    where = "training: %s" % ", ".join("%s.workers" % a for a in groups)
    if mode == "colocated":
        return train, train, where + "; generation: the same (hybrid engine)"
    reps, found = [], []
    for a in ROLLOUT_MANAGERS:
        m = getattr(trainer, a, None)
        if m is not None and hasattr(m, "get_replicas"):
            reps += list(m.get_replicas())
            found.append(a)
    mine = {getattr(w, "_actor_id", None) or id(w) for w in train}
    gen = [w for w in _handles(reps) if (getattr(w, "_actor_id", None) or id(w)) not in mine]
    if not gen:
        raise IntegrationError(
            "eerl: %s: the trainer (%s) runs rollout on GPUs of its own, but no rollout replica "
            "of its %s has workers apart from the training workers: eerl cannot tell which "
            "GPUs generate. %s" % (framework(), type(trainer).__name__,
                                   " or ".join(ROLLOUT_MANAGERS), framework()._known()),
            "verl", framework().version, list(ROLLOUT_MANAGERS))
    return train, gen, where + "; generation: the workers of %s's replicas" % "/".join(found)


def _ids(recs):
    out = []
    for r in recs:
        for g in r["gpus"]:
            if g not in out:
                out.append(g)
    return out


def local_pools(mode, gen_recs, train_recs, opts):
    """{"generation": [...], "training": [...]} as NVML indices of this node (the one verl's
    TaskRunner and every worker are on): the workers' GPUs, or +eerl.pools checked against them
    (colocated: one given is both). ValueError naming a GPU eerl cannot reach here, or one of
    +eerl.pools the job does not use."""
    from .. import _placement as P
    for what, recs in (("training", train_recs), ("rollout", gen_recs)):
        if not _ids(recs):  # never the node's other GPUs in their place: other jobs' maybe
            raise ValueError("eerl: verl's %s workers use no GPU (Ray gave them none, and "
                             "CUDA_VISIBLE_DEVICES names none): eerl controls only GPUs the "
                             "job uses, so it takes none of the node's. Give the workers GPUs "
                             "(trainer.n_gpus_per_node), or run without eerl" % what)
    node, where = P.node_gpus(opts.get("eerld"))
    train = P.find(_ids(train_recs), node, where, "verl's training workers")
    pools = {"training": train, "generation": train if gen_recs is train_recs else
             P.find(_ids(gen_recs), node, where, "verl's rollout workers")}
    given = dict(opts.get("pools") or {})
    job = sorted(set(pools["generation"]) | set(pools["training"]))
    for key, gpus in given.items():
        mine = P.find(gpus, node, where, "+eerl.pools.%s" % key)
        for g, idx in zip(gpus, mine):
            if idx not in job:
                raise ValueError("eerl: +eerl.pools.%s names GPU %s, which the job does not use: "
                                 "verl's workers use %s (NVML indices of %s)"
                                 % (key, g, ", ".join(map(str, job)), where))
        roles = ("generation", "training") if mode == "colocated" and len(given) == 1 else (key,)
        for role in roles:
            pools[role] = mine
    return pools


# ---- the session --------------------------------------------------------------------------------


def _here():
    import ray
    return ray.get_runtime_context().get_node_id()


def open_session(trainer, opts):
    """(session, adapter or None, {"mode", "pools_from", "nodes"}) for the job trainer belongs
    to, opened; nothing left open when it raises."""
    from ... import multinode
    mode, why = mode_of(trainer)
    train_w, gen_w, where = worker_handles(trainer, mode)
    train = multinode.ray_worker_gpus(train_w)
    gen = train if gen_w is train_w else multinode.ray_worker_gpus(gen_w)
    nodes = sorted({r.get("node_id") for r in train + gen}, key=str)
    run_info = {"framework": str(framework()), "trainer": why, "pools_from": where}
    run_info.update(opts.get("run_info") or {})
    if set(nodes) <= {_here()}:
        import eerl
        kw = {k: opts[k] for k in SESSION_KEYS if k in opts}
        kw["run_info"] = run_info
        pools = local_pools(mode, gen, train, opts)
        return eerl.Session(mode=mode, pools=pools, **kw), None, {
            "mode": mode, "pools": pools, "nodes": 1}
    extra = sorted(set(opts) - set(MULTINODE_KEYS) - {"strict", "phases", "log_metrics"})
    if extra:
        why = _common.SINGLE_NODE_ONLY.get(
            extra[0], "across nodes eerl finds the pools itself from the workers")
        raise IntegrationError(
            "eerl: +eerl.%s: verl's workers are on %d nodes, and %s: leave +eerl.%s out"
            % (extra[0], len(nodes), why, extra[0]), "verl", framework().version, [extra[0]])
    kw = {k: opts[k] for k in MULTINODE_KEYS if k in opts}
    kw["run_info"] = run_info
    adapter = multinode.RayAdapter.for_workers(gen, train)
    try:
        pools = adapter.locate({"generation": gen, "training": train})
        s = multinode.MultiNodeSession(adapter, mode=mode, pools=pools, **kw)
    except BaseException:
        adapter.close()
        raise
    return s, adapter, {"mode": mode, "pools": pools, "nodes": len(nodes)}


class Job:
    """eerl for the fit() of verl's trainer in this process (verl's TaskRunner): patch() wraps
    fit() of the trainer classes; the outermost fit() opens the session and installs the hook,
    and closes both when it returns or raises. opened: how many fits ran with eerl on."""

    def __init__(self, opts):
        self.opts = opts
        self.session = self.hook = self.adapter = None
        self.info = None
        self.opened = 0
        self._depth = 0
        self._patches = []

    def patch(self):
        for cls in trainer_classes():
            orig = cls.__dict__["fit"]
            cls.fit = self._wrap(orig)
            self._patches.append((cls, orig, cls.fit))

    def unpatch(self):
        for cls, orig, mine in reversed(self._patches):
            if cls.__dict__.get("fit") is mine:
                cls.fit = orig
        self._patches = []

    def _wrap(self, orig):
        job = self
        if inspect.iscoroutinefunction(orig):
            @functools.wraps(orig)
            async def fit(trainer, *args, **kwargs):
                job._enter(trainer)
                try:
                    return await orig(trainer, *args, **kwargs)
                finally:
                    job._exit()
            return fit

        @functools.wraps(orig)
        def fit(trainer, *args, **kwargs):
            job._enter(trainer)
            try:
                return orig(trainer, *args, **kwargs)
            finally:
                job._exit()
        return fit

    def _enter(self, trainer):
        self._depth += 1
        if self._depth > 1:
            return  # a subclass's fit() calling its base's
        try:
            self.session, self.adapter, self.info = open_session(trainer, self.opts)
            self.hook = install(self.session, phases=self.opts.get("phases"),
                                strict=bool(self.opts.get("strict", False)),
                                log_metrics=bool(self.opts.get("log_metrics", True)))
            self.opened += 1
        except BaseException:
            self._depth -= 1
            self.close()
            raise

    def _exit(self):
        self._depth -= 1
        if self._depth == 0:
            self.close()

    def close(self):
        """Uninstalls the hook, closes the session (every clock back) and the adapter; prints
        the session's end-of-run line (docs/what-eerl-did.md)."""
        hook, s, ad = self.hook, self.session, self.adapter
        self.hook = self.session = self.adapter = None
        try:
            if hook is not None:
                hook.uninstall()
        finally:
            try:
                if s is not None:
                    said = s.close()
                    if said is not None:  # what eerl did on the run, once, in this process
                        print(said.line, flush=True)
            finally:
                if ad is not None:
                    ad.close()


def trainer_classes():
    """verl's trainer classes that define fit() (in the modules install() hooks that import)."""
    out = []
    for name in tuple(TRAINERS) + tuple(RECIPES):
        try:
            m = importlib.import_module(name)
        except Exception:  # a recipe whose optional dependencies are absent (install says so)
            continue
        for cls in vars(m).values():
            # a Ray actor class (fully_async's trainer) runs fit() in a process of its own
            if (inspect.isclass(cls) and cls.__module__ == name and "fit" in cls.__dict__
                    and not hasattr(cls, "__ray_actor_class__") and cls not in out):
                out.append(cls)
    return out


# ---- verl's TaskRunner, with eerl on ------------------------------------------------------------


def run_task(run, runner, config, *args, **kwargs):
    """verl's TaskRunner.run (run, on runner) with eerl on for the trainer's fit()."""
    from omegaconf import open_dict
    opts = options(config)
    with open_dict(config):
        config.pop("eerl", None)
    job = Job(opts)
    job.patch()
    try:
        out = run(runner, config, *args, **kwargs)
    finally:
        job.unpatch()
        job.close()
    if not job.opened:
        raise IntegrationError(
            "eerl: %s: %s.run() returned without calling fit() on a trainer eerl hooks (%s): "
            "eerl saw no update. %s" % (framework(), type(runner).__name__,
                                        ", ".join(c.__qualname__ for c in trainer_classes()),
                                        framework()._known()),
            "verl", framework().version, ["fit"])
    return out


def task_runner(base):
    """A Ray actor class like verl's TaskRunner class base (its Ray options kept), whose run()
    runs verl's with eerl on."""
    import ray
    cls = getattr(base, "__ray_actor_class__", None)
    if cls is None or not callable(getattr(cls, "run", None)):
        raise IntegrationError("eerl: %s: the TaskRunner verl's main passes (%r) is not a Ray "
                               "actor class with run(config). %s"
                               % (framework(), base, framework()._known()),
                               "verl", framework().version, ["TaskRunner.run"])

    def run(self, config, *args, **kwargs):
        return run_task(cls.run, self, config, *args, **kwargs)

    sub = type("Eerl" + cls.__name__, (cls,), {"run": run, "__module__": __name__})
    opts = dict(getattr(base, "_default_options", None) or {})
    return ray.remote(**opts)(sub) if opts else ray.remote(sub)


def check_entry(module):
    """IntegrationError naming each of verl's entry points eerl's entry runs that is absent:
    the module's main, verl.trainer.main_ppo.run_ppo and fit() of the trainers."""
    fw = framework()
    need = {}
    try:
        m = importlib.import_module(module)
        ppo = importlib.import_module(MAIN_PPO)
    except ImportError as e:
        fw.refuse(["%s (%s)" % (module, e)], what="cannot import")
    need["%s.main" % module] = callable(getattr(m, "main", None))
    need["%s.run_ppo" % MAIN_PPO] = callable(getattr(ppo, "run_ppo", None))
    have = {c.__qualname__ for c in trainer_classes()}
    for name in ("PPOTrainer", "RayPPOTrainer"):
        need["fit() of verl's %s" % name] = name in have
    fw.require(need)
    return m, ppo


def main(module, argv=None):
    """Runs verl's entry point module (its Hydra main) with eerl on. argv: the overrides
    (default: sys.argv[1:])."""
    check()
    m, ppo = check_entry(module)
    orig = ppo.run_ppo

    def run_ppo(config, task_runner_class, *args, **kwargs):
        options(config)  # a bad +eerl key is refused before Ray starts
        return orig(config, task_runner(task_runner_class), *args, **kwargs)

    saved = sys.argv
    ppo.run_ppo = run_ppo
    if argv is not None:
        sys.argv = [saved[0] if saved else module] + list(argv)
    try:
        return m.main()
    finally:
        sys.argv = saved
        if ppo.run_ppo is run_ppo:
            ppo.run_ppo = orig
