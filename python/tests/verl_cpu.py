"""Runs the installed verl's trainers on the CPU, replacing only what runs on GPUs in a real job.

Ours, not verl's (the tests' stand-ins for GPU work; everything else is verl's code as installed):
  * Rollout: the rollout engine (vLLM/SGLang) with the agent loop in front of it. For each prompt
    it makes rollout.n trajectories (random lengths, some tool-result tokens masked out as a
    multi-turn agent loop masks them, a reward, rollout log-probs) as verl's AgentLoopOutput, and
    writes them to TransferQueue with the fields and tags verl's AgentLoopWorkerTQ writes
    (min/max_global_steps: the weights version it holds). It records what it produced.
  * Actor: the actor/ref worker group. compute_log_prob writes log-probs and entropy back;
    update_actor records the response_mask it is handed (the tokens a real loss would use).
  * Checkpoints: the checkpoint engine manager; update_weights(global_steps) gives rollout the
    new weights version.
The trainer objects are verl's: PPOTrainerSync / PPOTrainerColocateAsync /
PPOTrainerSeparateAsync built by verl's __init__ from verl's own ppo_trainer.yaml (Hydra), with
the attributes init() would set from GPU workers set to the stand-ins, then verl's fit().
"""

import contextlib
import os
import shutil
import tempfile
from types import SimpleNamespace

import numpy as np
import torch

GPUS = 3  # what the tests' Ray instance declares


def overrides(mode, steps, correction=False, extra=()):
    """The Hydra overrides of verl's ppo_trainer.yaml for a small run of the v1 trainer mode
    (sync, colocate_async, separate_async) on the CPU stand-ins."""
    ov = [
        "trainer.v1.trainer_mode=%s" % mode,
        "data.train_batch_size=4",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.use_kl_loss=True",  # a reference policy: the "ref" stage
        "algorithm.adv_estimator=grpo",
        "trainer.total_epochs=1",
        "trainer.total_training_steps=%d" % steps,
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.val_before_train=False",
        "trainer.logger=[]",
        "trainer.resume_mode=disable",
    ]
    if mode != "sync":
        ov.append("data.gen_batch_size=1")  # what verl's _init_dataloader sets for async modes
    if mode == "separate_async":
        ov += ["trainer.v1.separate_async.parameter_sync_step=1",
               "actor_rollout_ref.hybrid_engine=False",
               "actor_rollout_ref.rollout.nnodes=1",
               "actor_rollout_ref.rollout.n_gpus_per_node=1",
               "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl"]
    if correction:
        ov += ["actor_rollout_ref.rollout.calculate_log_probs=True",
               "algorithm.rollout_correction.rollout_rs=token_k1",
               "algorithm.rollout_correction.rollout_rs_threshold='0.8_1.25'"]
    return ov + list(extra)


def config(mode, steps, correction=False, overrides_=()):
    import verl
    from hydra import compose, initialize_config_dir
    d = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=d, version_base=None):
        return compose(config_name="ppo_trainer",
                       overrides=overrides(mode, steps, correction, overrides_))


@contextlib.contextmanager
def transfer_queue():
    """A local Ray instance of our own (never another one on this machine; on loopback) and
    TransferQueue. The instance declares GPUS GPUs, which Ray hands out as it would real ones
    (gpu_workers): the machine has none."""
    import ray
    import transfer_queue as tq
    from omegaconf import OmegaConf
    tmp = tempfile.mkdtemp(prefix="eerl-ray-")
    from conftest import HERE, PYROOT, RAY_NODE_IP, RAY_SYSTEM_CONFIG
    path = os.pathsep.join([PYROOT, HERE] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    ray.init(address="local", num_cpus=4, num_gpus=GPUS, include_dashboard=False,
             log_to_driver=False, _temp_dir=tmp, configure_logging=False,
             _node_ip_address=RAY_NODE_IP, _system_config=RAY_SYSTEM_CONFIG,
             runtime_env={"env_vars": {"PYTHONPATH": path}})  # eerl and these modules
    try:
        tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
        try:
            yield tq
        finally:
            tq.close()
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def logging_into(logged):
    """verl's Tracking.log also appends each step's metrics to logged, for as long as it lasts."""
    from verl.utils import tracking
    orig = tracking.Tracking.log

    def log(self_, data, step, *a, **k):
        logged.append(dict(data))
        return orig(self_, data, step, *a, **k)
    tracking.Tracking.log = log
    try:
        yield
    finally:
        tracking.Tracking.log = orig


class Rollout:
    """The rollout engine and agent loop (ours; see the module docstring)."""

    def __init__(self, n, seed=1, logprobs=False):
        self.n = n
        self.rng = np.random.RandomState(seed)
        self.version = 0
        self.logprobs = logprobs
        self.produced = {}  # key -> (generated tokens, response length)

    def generate_sequences(self, batch):
        import transfer_queue as tq
        from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
        from verl.utils.model import compute_position_id_with_mask
        from verl.utils.tensordict_utils import list_of_dict_to_tensordict
        validate = "validate" in batch.keys() and bool(batch["validate"])
        partition = "val" if validate else "train"
        steps = batch["global_steps"]
        steps = int(steps.data if hasattr(steps, "data") else steps)
        for i in range(len(batch)):
            uid = batch["uid"][i]
            uid = uid.data if hasattr(uid, "data") else uid
            keys, fields, tags = [], [], []
            for sid in range(self.n):
                plen = int(self.rng.randint(3, 7))
                a, tool, b = (int(self.rng.randint(2, 9)), int(self.rng.randint(0, 4)),
                              int(self.rng.randint(0, 5)))
                mask = [1] * a + [0] * tool + [1] * b
                rlen = len(mask)
                out = AgentLoopOutput(
                    prompt_ids=[int(x) for x in self.rng.randint(3, 50, plen)],
                    response_ids=[int(x) for x in self.rng.randint(3, 50, rlen)],
                    response_mask=mask,
                    response_logprobs=([float(x) for x in -self.rng.rand(rlen)]
                                       if self.logprobs else None),
                    reward_score=float(self.rng.rand()),
                    num_turns=3 if tool else 2,
                    metrics=AgentLoopMetrics(),
                    extra_fields={"min_global_steps": self.version,
                                  "max_global_steps": self.version, "reward_extra_info": {}})
                field = out.as_dict()
                field.update({"uid": uid, "global_steps": steps, "session_id": sid})
                field["loss_mask"] = field["response_mask"]
                input_ids = torch.cat([field["prompts"], field["responses"]])
                attn = torch.ones_like(input_ids)
                field["input_ids"] = input_ids
                field["position_ids"] = compute_position_id_with_mask(attn.unsqueeze(0)).squeeze(0)
                field["multi_modal_inputs"] = {}
                key = "%s_%d_0" % (uid, sid)
                keys.append(key)
                fields.append(field)
                tags.append({"status": "success", "prompt_len": plen, "response_len": rlen,
                             "seq_len": plen + rlen, "global_steps": steps,
                             "min_global_steps": self.version, "max_global_steps": self.version})
                self.produced[key] = (float(sum(mask)), float(sum(mask)))
            tq.kv_batch_put(keys=keys, fields=list_of_dict_to_tensordict(fields), tags=tags,
                            partition_id=partition)
            tq.kv_put(key=uid, partition_id=partition, tag={"status": "finished"})


class Actor:
    """The actor / reference worker group (ours; see the module docstring)."""

    def __init__(self, rollout, seed=2):
        self.rollout = rollout
        self.rng = torch.Generator().manual_seed(seed)
        self._dispatch_info = {}
        self.trained = []

    def _query_dispatch_info(self, role):
        return [0]  # one data-parallel rank

    def compute_log_prob(self, batch):
        import transfer_queue as tq
        from tensordict import TensorDict
        fields = ["response_mask"] + (["rollout_log_probs"] if self.rollout.logprobs else [])
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                               select_fields=fields)
        lps, ents = [], []
        for i, m in enumerate(data["response_mask"].unbind()):
            base = (data["rollout_log_probs"].unbind()[i] if self.rollout.logprobs
                    else -torch.rand(m.shape[0], generator=self.rng))
            # training and rollout engines disagree a little, on some tokens a lot
            jitter = torch.where(torch.rand(m.shape[0], generator=self.rng) < 0.3,
                                 torch.full((m.shape[0],), 0.7), torch.zeros(m.shape[0]))
            lps.append(base + jitter)
            ents.append(torch.rand(m.shape[0], generator=self.rng))
        out = TensorDict({"log_probs": torch.nested.as_nested_tensor(lps, layout=torch.jagged),
                          "entropy": torch.nested.as_nested_tensor(ents, layout=torch.jagged)},
                         batch_size=len(batch))
        tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=out)
        return batch

    compute_ref_log_prob = compute_log_prob

    # separate_async's DetachActorWorker keeps pi_old on the CPU between local updates
    def save_model_to_cpu(self, n):
        pass

    def restore_model_from_cpu(self, n):
        pass

    def clear_cpu_model(self, n):
        pass

    def update_actor(self, batch):
        import transfer_queue as tq
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                               select_fields=["response_mask"])
        masks = data["response_mask"].unbind()
        produced = [self.rollout.produced.get(k) for k in batch.keys]
        self.trained.append({
            "trained": float(sum(float(m.sum()) for m in masks)),
            "generated": float(sum(p[0] for p in produced if p is not None)),
            "longest": float(max(p[1] for p in produced if p is not None)),
        })
        return {"metrics": {"mfu": 0.0, "pg_loss": [0.0]}}


class Checkpoints:
    """The checkpoint engine manager (ours): update_weights hands rollout the new version."""

    def __init__(self, rollout):
        self.rollout = rollout
        self.calls = []

    def update_weights(self, global_steps=None):
        self.calls.append(("update_weights", global_steps))
        self.rollout.version = int(global_steps)
        return {}

    def sleep_replicas(self):
        self.calls.append(("sleep",))

    def abort_replicas(self, *a, **k):
        self.calls.append(("abort",))

    def resume_generation_replicas(self):
        self.calls.append(("resume",))


class Prompts:
    """The dataloader: gen_batch_size prompts per fetch (verl's collate output, text only)."""

    def __init__(self, per_fetch, total):
        self.per_fetch, self.total = per_fetch, total

    def __iter__(self):
        for start in range(0, self.total, self.per_fetch):
            idx = list(range(start, start + self.per_fetch))
            yield {"raw_prompt": np.array(["prompt %d" % i for i in idx], dtype=object),
                   "index": np.array(idx, dtype=object)}


def setup_v1(t, cfg, steps, rollout, actor):
    """What verl's init() sets on the v1 trainer t from its GPU workers, set to the stand-ins."""
    t.tokenizer = SimpleNamespace(eos_token_id=2, pad_token_id=0)
    t.processor = None
    gen = cfg.data.get("gen_batch_size", None) or cfg.data.train_batch_size
    t.train_dataloader = Prompts(gen, 4 * cfg.data.train_batch_size * (steps + 2))
    t.train_dataloader_it = None
    t.steps_per_epoch = steps
    t.total_training_steps = steps
    t._init_dump_executor()
    t.resource_pool_manager = SimpleNamespace(get_n_gpus=lambda: 2)
    t.actor_rollout_wg = actor
    t.ref_policy_wg = actor
    t.ref_in_actor = False
    # rewards come with the trajectories (rollout-side reward loop), as by default
    t.reward_loop_manager = SimpleNamespace(reward_loop_worker_handles=["rollout-side"])
    t.checkpoint_manager = Checkpoints(rollout)
    if cfg.trainer.v1.trainer_mode == "separate_async":
        from verl.trainer.ppo.v1.trainer_separate_async import HybridEngineMode
        t.standalone_checkpoint_manager = t.checkpoint_manager
        t.current_mode = HybridEngineMode.TRAINER
    t._load_checkpoint()  # resume_mode=disable: global_steps = 0
    t.on_init_end()


class V1Run:
    """One v1 trainer (mode: sync, colocate_async, separate_async) built by verl, run by verl."""

    def __init__(self, mode, steps=4, correction=False, overrides=()):
        from verl.trainer.ppo.v1 import get_trainer_cls
        cfg = config(mode, steps, correction, overrides)
        self.steps = steps
        self.rollout = Rollout(cfg.actor_rollout_ref.rollout.n,
                               logprobs=bool(cfg.actor_rollout_ref.rollout.calculate_log_probs))
        self.actor = Actor(self.rollout)
        t = get_trainer_cls(mode)(cfg)
        setup_v1(t, cfg, steps, self.rollout, self.actor)
        self.trainer = t
        self.logged = []

    @property
    def trained(self):
        return self.actor.trained

    def fit(self):
        with logging_into(self.logged):
            if isinstance(self, V1Run):
                self.trainer.fit(self.rollout)
            else:
                self.trainer.fit()


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
