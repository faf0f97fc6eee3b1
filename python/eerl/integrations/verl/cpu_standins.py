"""Stand-ins for the GPU work of a verl job, so that verl's own v1 trainers run on a CPU (the dry
run, eerl.integrations.verl.dry_run, and the tests; docs/integrations/verl.md, "A dry run").

verl's, as installed (verl 0.9.1): the trainer classes (PPOTrainerSync, PPOTrainerColocateAsync,
PPOTrainerSeparateAsync, chosen by verl's get_trainer_cls), built by verl's __init__ from verl's
own ppo_trainer.yaml through Hydra, and run by verl's fit(): its schedule, stage timers,
advantages (GRPO), rollout correction, metrics and logging; TransferQueue (a real one, over a
local Ray instance) carries the batches.

Stand-ins (ours, not verl's; they replace what runs on GPUs in a real job, and do no learning):
  * Rollout: the rollout engine (vLLM/SGLang) with the agent loop in front of it. For each prompt
    it makes rollout.n trajectories (random token ids and lengths, some tool-result tokens masked
    out as a multi-turn agent loop masks them, a random reward, rollout log-probs) as verl's
    AgentLoopOutput, and writes them to TransferQueue with the fields and tags verl's
    AgentLoopWorkerTQ writes (min/max_global_steps: the weights version it holds). It records
    what it produced.
  * Actor: the actor/ref worker group. compute_log_prob writes random log-probs and entropy back;
    update_actor trains nothing: it records the response_mask it is handed (the tokens a real
    loss would use).
  * Checkpoints: the checkpoint engine manager; update_weights(global_steps) gives rollout the
    new weights version (no weights move).
  * The tokenizer and the dataloader (numbered text prompts), and what the trainer's init() would
    set from its GPU workers (setup_v1).
Needs verl, TransferQueue, Ray, PyTorch and numpy (verl's own requirements).
"""

import contextlib
import os
import shutil
import tempfile
from types import SimpleNamespace

import numpy as np
import torch

GPUS = 3  # what the Ray instance of transfer_queue() declares


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


# Ray's node listens and connects on loopback only
RAY_NODE_IP = "127.0.0.1"


@contextlib.contextmanager
def transfer_queue(temp_dir=None, system_config=None, pythonpath=()):
    """A local Ray instance of our own (never another one on this machine; on 127.0.0.1, no
    dashboard, its files in temp_dir, the caller's, else in a fresh temporary folder removed
    after) and TransferQueue over it; Ray is shut down on the way out. The instance declares GPUS
    GPUs, which Ray hands out as it would real ones: the machine need have none. Ray replaces
    127.0.0.1 by the machine's outward address unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 was in
    the environment when Ray was first imported (dry_run.ray_on_loopback()). pythonpath: folders
    Ray's workers import from, before $PYTHONPATH."""
    import ray
    import transfer_queue as tq
    from omegaconf import OmegaConf
    tmp = temp_dir or tempfile.mkdtemp(prefix="eerl-ray-")
    path = os.pathsep.join(list(pythonpath) + [p for p in [os.environ.get("PYTHONPATH")] if p])
    kw = {"_system_config": system_config} if system_config else {}
    if path:
        kw["runtime_env"] = {"env_vars": {"PYTHONPATH": path}}
    try:
        ray.init(address="local", num_cpus=4, num_gpus=GPUS, include_dashboard=False,
                 log_to_driver=False, _temp_dir=tmp, configure_logging=False,
                 _node_ip_address=RAY_NODE_IP, **kw)
        tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
        try:
            yield tq
        finally:
            tq.close()
    finally:
        ray.shutdown()
        if not temp_dir:
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

