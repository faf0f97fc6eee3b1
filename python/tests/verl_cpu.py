"""Runs the installed verl's trainers on the CPU, replacing only what runs on GPUs in a real job.

The v1 trainers' stand-ins (rollout with its agent loop, actor/ref worker group, checkpoint
engine) are the package's, eerl.integrations.verl.cpu_standins (its docstring says what is
verl's and what is ours), which the dry run uses too. Here, ours as well: the legacy trainer's,
the one-step-off and fully-async recipes' stand-ins, built on those.
"""

import contextlib
import os
from types import SimpleNamespace

import numpy as np
import torch

from eerl.integrations.verl import cpu_standins
from eerl.integrations.verl.cpu_standins import (GPUS, Actor, Checkpoints, Prompts, Rollout,
                                                  V1Run, config, logging_into, overrides,
                                                  setup_v1)

__all__ = ["GPUS", "Actor", "Checkpoints", "Prompts", "Rollout", "V1Run", "config",
           "logging_into", "overrides", "setup_v1", "transfer_queue"]


@contextlib.contextmanager
def transfer_queue():
    """cpu_standins.transfer_queue with the tests' Ray settings (conftest.py)."""
    from conftest import HERE, PYROOT, RAY_SYSTEM_CONFIG
    with cpu_standins.transfer_queue(system_config=RAY_SYSTEM_CONFIG,
                                     pythonpath=[PYROOT, HERE]) as tq:  # eerl and these modules
        yield tq


# ---- the legacy trainer (trainer.use_v1=False): DataProto batches, no TransferQueue ----------


class LegacyRollout(Rollout):
    """The rollout engine and agent loop for the legacy trainer (ours): a padded DataProto as
    verl's AgentLoopManager returns it (prompts left-, responses right-padded; response_mask 0
    on tool-result tokens; min/max_global_steps per trajectory)."""

    def __init__(self, seed=1):
        Rollout.__init__(self, n=1, seed=seed, logprobs=True)
        self.steps = []  # per call: (generated tokens, longest)

    def generate_sequences(self, gen):
        from verl.protocol import DataProto
        n = len(gen)
        P, R = 6, 14
        prompts = torch.zeros(n, P, dtype=torch.int64)
        responses = torch.zeros(n, R, dtype=torch.int64)
        attn = torch.zeros(n, P + R, dtype=torch.int64)
        rmask = torch.zeros(n, R, dtype=torch.int64)
        lps = torch.zeros(n, R)
        scores = torch.zeros(n, R)
        for i in range(n):
            plen = int(self.rng.randint(3, P + 1))
            a, tool, b = (int(self.rng.randint(2, 9)), int(self.rng.randint(0, 3)),
                          int(self.rng.randint(0, 3)))
            mask = [1] * a + [0] * tool + [1] * b
            rlen = len(mask)
            prompts[i, P - plen:] = torch.from_numpy(self.rng.randint(3, 50, plen))
            responses[i, :rlen] = torch.from_numpy(self.rng.randint(3, 50, rlen))
            attn[i, P - plen:P + rlen] = 1
            rmask[i, :rlen] = torch.tensor(mask)
            lps[i, :rlen] = -torch.from_numpy(self.rng.rand(rlen)).float()
            scores[i, rlen - 1] = float(self.rng.rand())
        pos = torch.clamp(torch.cumsum(attn, dim=1) - 1, min=0)
        versions = np.array([self.version] * n, dtype=object)
        self.steps.append((float(rmask.sum()), float(rmask.sum(-1).max())))
        return DataProto.from_dict(
            tensors={"prompts": prompts, "responses": responses,
                     "input_ids": torch.cat([prompts, responses], dim=1), "attention_mask": attn,
                     "position_ids": pos, "response_mask": rmask, "rollout_log_probs": lps,
                     "rm_scores": scores},
            non_tensors={"__num_turns__": np.array([2] * n, dtype=np.int32),
                         "multi_modal_inputs": np.array([{} for _ in range(n)], dtype=object),
                         "min_global_steps": versions, "max_global_steps": versions.copy()},
            meta_info={"timing": {}})


class LegacyActor:
    """The actor / reference worker group for the legacy trainer (ours): the padding-free
    TensorDict in and out, as verl's engine workers take and return it."""

    def __init__(self, seed=2):
        self.rng = torch.Generator().manual_seed(seed)
        self.trained = []

    def _per_token(self, td):
        ids = td["input_ids"]
        return torch.nested.nested_tensor_from_jagged(
            -torch.rand(ids.values().shape[0], generator=self.rng), offsets=ids.offsets())

    def compute_log_prob(self, td):
        from verl.utils import tensordict_utils as tu
        return tu.get_tensordict({"log_probs": self._per_token(td), "entropy": self._per_token(td)},
                                 non_tensor_dict={"metrics": {"mfu": 0.0}})

    compute_ref_log_prob = compute_log_prob

    def update_actor(self, td):
        from verl.utils import tensordict_utils as tu
        self.trained.append(float(td["response_mask"].sum()))
        return tu.get_tensordict({"dummy": torch.zeros(1)},
                                 non_tensor_dict={"metrics": {"mfu": 0.0, "pg_loss": [0.0]}})


class LegacyRun:
    """verl's legacy RayPPOTrainer (trainer.use_v1=False), or the separation recipe's
    SeparateRayPPOTrainer built on it, built by verl, run by verl."""

    def __init__(self, steps=3, correction=False, separation=False):
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer
        from verl.trainer.ppo.utils import Role
        if separation:  # verl.experimental.separation: the same schedule, split into _fit_* steps
            from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer
            RayPPOTrainer = SeparateRayPPOTrainer
        from verl.utils.dataset.rl_dataset import collate_fn
        cfg = config("sync", steps, correction,
                     ["trainer.use_v1=False", "trainer.balance_batch=False",
                      "actor_rollout_ref.rollout.n=1", "data.dataloader_num_workers=0"])
        self.steps = steps
        self.rollout = LegacyRollout()
        self.actor = LegacyActor()
        # what verl's RLHFDataset yields for the agent loop (text, a dummy tensor)
        data = [{"raw_prompt": "prompt %d" % i, "index": i, "dummy_tensor": torch.tensor([0])}
                for i in range(4 * (steps + 1))]
        t = RayPPOTrainer(config=cfg, tokenizer=SimpleNamespace(eos_token_id=2, pad_token_id=0),
                          role_worker_mapping={Role.ActorRollout: object},
                          resource_pool_manager=SimpleNamespace(get_n_gpus=lambda: 2),
                          train_dataset=data, val_dataset=data[:4], collate_fn=collate_fn)
        t.actor_rollout_wg = self.actor
        t.ref_policy_wg = self.actor
        t.async_rollout_manager = self.rollout
        t.checkpoint_manager = Checkpoints(self.rollout)
        self.trainer = t
        self.logged = []

    @property
    def trained(self):
        return [{"generated": g, "trained": n, "longest": l}
                for (g, l), n in zip(self.rollout.steps, self.actor.trained)]

    def fit(self):
        V1Run.fit(self)


# ---- the one-step-off-policy recipe (verl.experimental.one_step_off_policy) ------------------


class AsyncRollout(LegacyRollout):
    """The rollout pool for one-step-off (ours): generate_sequences is awaited beside the
    trainer's step. Batch i (from 0) finishes once the actor has trained i times, so the
    generation of the next batch overlaps the current step's log-prob and training, as on its
    own GPUs, in an order that does not depend on machine speed."""

    def __init__(self, actor):
        LegacyRollout.__init__(self)
        self.actor = actor
        self.batches = 0

    async def generate_sequences(self, gen):
        import asyncio
        i = self.batches
        self.batches += 1
        version = self.version
        while len(self.actor.trained) < i:
            await asyncio.sleep(0)
        self.version, v = version, self.version
        out = LegacyRollout.generate_sequences(self, gen)
        self.version = v
        return out


class OneStepOffRun(LegacyRun):
    """verl's OneStepOffRayTrainer (separate rollout and trainer pools), built and run by verl."""

    def __init__(self, steps=3):
        from verl.experimental.one_step_off_policy.ray_trainer import OneStepOffRayTrainer
        from verl.trainer.ppo.utils import Role
        from verl.utils.dataset.rl_dataset import collate_fn
        cfg = config("sync", steps, False,
                     ["trainer.use_v1=False", "trainer.balance_batch=False",
                      "actor_rollout_ref.rollout.n=1", "data.dataloader_num_workers=0",
                      "actor_rollout_ref.hybrid_engine=False"])
        self.steps = steps
        self.actor = LegacyActor()
        self.rollout = AsyncRollout(self.actor)
        data = [{"raw_prompt": "prompt %d" % i, "index": i, "dummy_tensor": torch.tensor([0])}
                for i in range(4 * (steps + 1))]
        t = OneStepOffRayTrainer(config=cfg,
                                 tokenizer=SimpleNamespace(eos_token_id=2, pad_token_id=0),
                                 role_worker_mapping={Role.Actor: object},
                                 resource_pool_manager=SimpleNamespace(get_n_gpus=lambda: 2),
                                 train_dataset=data, val_dataset=data[:4], collate_fn=collate_fn)
        t.actor_rollout_wg = t.actor_wg = self.actor
        t.ref_policy_wg = self.actor
        t.async_rollout_manager = self.rollout
        t.checkpoint_manager = Checkpoints(self.rollout)
        self.trainer = t
        self.logged = []

    def fit(self):
        import asyncio
        with logging_into(self.logged):
            asyncio.run(self.trainer.fit())


# ---- the fully-async recipe (verl.experimental.fully_async_policy) --------------------------


class SampleQueue:
    """The rollouter's side of the message queue (ours): one RolloutSample per prompt (its
    rollout.n responses, as verl's FullyAsyncRollouter puts them), produced by the stand-in
    rollout at the weights version it holds. `ahead` samples wait in the queue before the
    trainer asks (the rollouter runs ahead); after `total` samples it sends None (the end)."""

    def __init__(self, rollout, n, ahead, total):
        self.rollout, self.n, self.total = rollout, n, total
        self.sent = 0
        self.queue = [self._make() for _ in range(ahead)]

    def _make(self):
        import ray
        from verl.experimental.fully_async_policy.detach_utils import RolloutSample
        out = LegacyRollout.generate_sequences(self.rollout, list(range(self.n)))
        n = len(out)
        out.non_tensor_batch["uid"] = np.array(["p%d" % self.sent] * n, dtype=object)
        out.meta_info["metrics"] = [{"generate_sequences": 0.0, "tool_calls": 0.0}] * n
        out.meta_info.pop("timing", None)
        return ray.cloudpickle.dumps(RolloutSample(full_batch=out, sample_id="s%d" % self.sent,
                                                   epoch=0, rollout_status={}))

    async def get_sample(self):
        if self.sent >= self.total:
            return None, 0
        self.queue.append(self._make())
        self.sent += 1
        return self.queue.pop(0), len(self.queue)

    async def get_queue_size(self):
        return len(self.queue)

    def get_queue_size_sync(self):
        return len(self.queue)


def _rollouter_actor():
    """The rollouter as the trainer calls it: a Ray actor (defined here, so Ray ships it by
    value). It reports no produced samples and resets nothing."""
    import ray

    @ray.remote(num_cpus=0)
    class Rollouter:
        def get_total_produced_samples(self):
            return 0

        def get_completed_steps(self):
            return 0

        def reset_staleness(self):
            return {}

    return Rollouter.remote()


class AsyncCheckpoints(Checkpoints):
    async def update_weights(self, global_steps=None):
        return Checkpoints.update_weights(self, global_steps)


class FullyAsyncRun(LegacyRun):
    """verl's FullyAsyncTrainer (rollout on GPUs of its own feeding a message queue), built by
    verl, run by verl's fit() on a local Ray instance (the rollouter is a Ray actor)."""

    def __init__(self, steps=3):
        import verl
        from hydra import compose, initialize_config_dir
        from verl.experimental.fully_async_policy.fully_async_trainer import FullyAsyncTrainer
        from verl.trainer.ppo.utils import Role
        from verl.utils import tracking
        d = os.path.join(os.path.dirname(verl.__file__), "experimental", "fully_async_policy",
                         "config")
        ov = ["data.train_batch_size=4", "actor_rollout_ref.rollout.n=2",
              "actor_rollout_ref.actor.ppo_mini_batch_size=4",
              "actor_rollout_ref.actor.use_kl_loss=True", "algorithm.adv_estimator=grpo",
              "trainer.test_freq=-1", "trainer.save_freq=-1", "trainer.logger=[]",
              "trainer.resume_mode=disable", "trainer.balance_batch=False",
              "actor_rollout_ref.hybrid_engine=False", "rollout.nnodes=1",
              "rollout.n_gpus_per_node=1", "async_training.trigger_parameter_sync_step=1",
              "async_training.require_batches=1"]
        with initialize_config_dir(config_dir=d, version_base=None):
            cfg = compose(config_name="fully_async_ppo_trainer", overrides=ov)
        self.steps = steps
        self.actor = LegacyActor()
        self.rollout = LegacyRollout()
        self.logged = []
        logged, orig = self.logged, tracking.Tracking.log

        def log(self_, data, step, *a, **k):
            if any(k.startswith("response_length/") for k in data):
                logged.append(dict(data))
            return orig(self_, data, step, *a, **k)
        self._log = (tracking.Tracking, orig, log)
        # verl makes it a Ray actor (its own process in a real job); its class runs here
        t = FullyAsyncTrainer.__ray_actor_class__(
            cfg, SimpleNamespace(eos_token_id=2, pad_token_id=0), {Role.Actor: object},
            SimpleNamespace(get_n_gpus=lambda: 2))
        per = cfg.actor_rollout_ref.actor.ppo_mini_batch_size * cfg.async_training.require_batches
        t.actor_rollout_wg = t.actor_wg = self.actor
        self.actor.save_model_to_cpu = self.actor.restore_model_from_cpu = lambda n: None
        self.actor.clear_cpu_model = lambda n: None
        t.ref_policy_wg = self.actor
        t.checkpoint_manager = AsyncCheckpoints(self.rollout)
        t.message_queue_client = SampleQueue(self.rollout, cfg.actor_rollout_ref.rollout.n,
                                             ahead=per, total=per * steps)
        t.rollouter = _rollouter_actor()
        t.set_total_train_steps(steps)
        self.per_step = per
        self.trainer = t

    @property
    def trained(self):
        # the rollout made `ahead` samples before the first step; each step consumed `per`
        out, g = [], self.rollout.steps
        for i, n in enumerate(self.actor.trained):
            batch = g[i * self.per_step:(i + 1) * self.per_step]
            out.append({"generated": sum(b[0] for b in batch), "trained": n,
                        "longest": max(b[1] for b in batch)})
        return out

    def fit(self):
        import asyncio
        cls, orig, log = self._log
        cls.log = log
        try:
            asyncio.run(self.trainer.fit())
        finally:
            cls.log = orig
