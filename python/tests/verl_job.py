"""verl's own TaskRunner on the CPU, for the one-line entry's tests (test_verl.py): the test runs
`python -m eerl.integrations.verl.main_ppo <overrides>` and verl's main, run_ppo and TaskRunnerV1
run as released. Ray loads this module in every worker process of that job through its
worker_process_setup_hook, given in verl's own configuration
(+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=verl_job.setup).

Replaced, as in verl_cpu.py (ours, not verl's): what the v1 trainer's init() would start on GPUs.
When verl's trainer_base module is imported (in the TaskRunner's process), PPOTrainer.init is
replaced by one that sets verl_cpu's stand-ins (rollout, actor/ref, checkpoint engine), with
worker groups and rollout replicas whose .workers are Ray actors holding GPUs the way verl's
workers do (Ray assigns them: the test's Ray declares GPUs). verl's TaskRunnerV1 builds the
agent loop manager from the class its configuration names
(+actor_rollout_ref.rollout.agent.agent_loop_manager_class=verl_job.AgentLoop).

The stand-in actor appends what it was handed to train on, per step, to $VERL_JOB_RECORD (JSON
lines: generated, trained, longest), for the test to check against eerl's trace.
$VERL_JOB_TRAIN_GPUS (default 2) and $VERL_JOB_ROLLOUT_GPUS (separate_async; default 1): the
workers of each.
"""

import importlib.abc
import importlib.util
import json
import os
import sys

TARGET = "verl.trainer.ppo.v1.trainer_base"


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs patch(module) right after TARGET is imported (so processes that never import verl's
    trainer, such as the GPU stand-ins, never load it)."""

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        inner = spec.loader.exec_module

        def exec_module(module):
            inner(module)
            patch(module)
        spec.loader.exec_module = exec_module
        return spec


def setup():
    """Ray's worker_process_setup_hook."""
    if TARGET in sys.modules:
        patch(sys.modules[TARGET])
    else:
        sys.meta_path.insert(0, _AfterImport())


def patch(module):
    module.PPOTrainer.init = init


def gpu_workers(n):
    """n Ray actors of one GPU each, as verl's workers hold them."""
    import ray_workers
    return [ray_workers.Worker.options(num_gpus=1).remote() for _ in range(n)]


class Replica:
    def __init__(self, workers):
        self.workers = workers


class Servers:
    """An LLMServerManager (ours): its replicas and the client the agent loop talks to."""

    def __init__(self, rollout, replicas):
        self.rollout = rollout
        self.replicas = replicas

    def get_replicas(self):
        return list(self.replicas)

    def get_client(self, *args, **kwargs):
        return self.rollout


class AgentLoop:
    """The agent loop manager class verl's TaskRunnerV1 loads by name: the rollout stand-in."""

    @classmethod
    def create(cls, config, llm_client=None, **kwargs):
        return llm_client


def _recording(actor):
    path = os.environ.get("VERL_JOB_RECORD")
    inner = actor.update_actor

    def update_actor(batch):
        out = inner(batch)
        if path:
            with open(path, "a") as f:
                f.write(json.dumps(actor.trained[-1]) + "\n")
        return out
    actor.update_actor = update_actor


def init(self):
    """PPOTrainer.init on the stand-ins (verl_cpu.setup_v1), with workers holding GPUs."""
    import verl_cpu
    cfg = self.config
    steps = int(cfg.trainer.total_training_steps)
    rollout = verl_cpu.Rollout(cfg.actor_rollout_ref.rollout.n,
                               logprobs=bool(cfg.actor_rollout_ref.rollout.calculate_log_probs))
    actor = verl_cpu.Actor(rollout)
    _recording(actor)
    actor.workers = gpu_workers(int(os.environ.get("VERL_JOB_TRAIN_GPUS", "2")))
    if getattr(self, "_enable_hybrid_replicas", True):
        self.llm_server_manager = Servers(rollout, [Replica(actor.workers)])
    else:
        self.llm_server_manager = Servers(rollout, [])
    if cfg.trainer.v1.trainer_mode == "separate_async":
        n = int(os.environ.get("VERL_JOB_ROLLOUT_GPUS", "1"))
        self.standalone_server_manager = Servers(rollout, [Replica(gpu_workers(n))])
    verl_cpu.setup_v1(self, cfg, steps, rollout, actor)
