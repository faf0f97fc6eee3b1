"""A tiny GRPO set-up on TRL for the tests (test_trl.py), and the worker its two-process test
starts with torchrun (run as a script).

Everything is built here, nothing is downloaded: a word-level tokenizer over a 12-token
vocabulary (tokenizers library), a randomly initialised 1-layer Llama from a config, saved to a
directory so TRL can load its reference model from it. Record notes what TRL did (its profiling
blocks, the tensors of each generation) beside eerl's hook."""

import json
import os
import socket

WORDS = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]
PROMPTS = ["a b", "c d", "e f", "g h", "i j", "a c", "b d", "e g"]
MAX_COMPLETION = 8


def build_model(path):
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1}
    for w in WORDS:
        vocab[w] = len(vocab)
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32,
                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                      max_position_embeddings=64, pad_token_id=0, eos_token_id=1,
                      bos_token_id=None)
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def reward_len(completions, **kwargs):
    return [float(len(c)) for c in completions]


def trainer(model_dir, out, max_steps=3, eval_steps=None, beta=0.1, **extra):
    """A GRPOTrainer: per step 2 micro-batches of 4 completions (2 per prompt), 8 tokens at most."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    rollout_func = extra.pop("rollout_func", None)
    kw = dict(output_dir=out, per_device_train_batch_size=4, num_generations=2,
              max_completion_length=MAX_COMPLETION, max_steps=max_steps,
              gradient_accumulation_steps=2, beta=beta, report_to=[], logging_steps=1,
              save_strategy="no", use_cpu=True, seed=0, dataloader_num_workers=0,
              disable_tqdm=True)
    if extra.get("use_transformers_continuous_batching"):
        kw["transformers_continuous_batching_config"] = {
            "block_size": 16, "num_blocks": 16, "max_batch_tokens": 64, "use_cuda_graph": False}
    eval_ds = None
    if eval_steps:
        kw.update(eval_strategy="steps", eval_steps=eval_steps, per_device_eval_batch_size=4,
                  num_generations_eval=2)
        eval_ds = Dataset.from_dict({"prompt": ["j i", "h g"]})
    kw.update(extra)
    return GRPOTrainer(model=model_dir, reward_funcs=reward_len, args=GRPOConfig(**kw),
                       train_dataset=Dataset.from_dict({"prompt": PROMPTS * 4}),
                       eval_dataset=eval_ds, processing_class=AutoTokenizer.from_pretrained(
                           model_dir), rollout_func=rollout_func)


class Record:
    """What TRL did. steps: per optimizer step, per _prepare_inputs call, the train-mode blocks
    eerl maps that ran at its top level (not nested in another mapped block). gens: per
    train-mode generation, G/L from TRL's completion lists (tool/env tokens excluded, as TRL
    counts them) and N from its loss mask (completion_mask x tool_mask)."""

    def __init__(self, trainer, monkeypatch=None):
        from transformers import TrainerCallback
        from trl.extras import profiling

        from eerl.integrations import trl as eerl_trl

        self.trainer = trainer
        self.steps = []
        self.gens = []
        self.eval_generate_blocks = 0
        self._prep = None
        self._mapped_depth = 0
        names = eerl_trl.PHASES
        rec = self
        pc = profiling.ProfilingContext
        orig_enter, orig_exit = pc.__enter__, pc.__exit__

        def label(ctx):
            return ctx.name.split(".", 1)[1]

        def enter(ctx):
            r = orig_enter(ctx)
            lb, train = label(ctx), trainer.model.training
            if lb == "_prepare_inputs" and train:
                rec._prep = []
                rec.steps[-1].append(rec._prep)
            elif lb in names and not train and names[lb] == "generation":
                rec.eval_generate_blocks += 1
            elif lb in names and train and rec._prep is not None:
                if rec._mapped_depth == 0:
                    rec._prep.append(lb)
                rec._mapped_depth += 1
            return r

        def exit_(ctx, *a):
            lb = label(ctx)
            if lb == "_prepare_inputs":
                rec._prep = None
            elif lb in names and rec._prep is not None and trainer.model.training:
                rec._mapped_depth -= 1
            return orig_exit(ctx, *a)

        setattr_ = monkeypatch.setattr if monkeypatch is not None else setattr
        setattr_(pc, "__enter__", enter)
        setattr_(pc, "__exit__", exit_)

        class Steps(TrainerCallback):
            def on_step_begin(self, *a, **k):
                rec.steps.append([])

        trainer.add_callback(Steps())
        orig_generate = trainer._generate
        orig_gsc = trainer._generate_and_score_completions

        def _generate(prompts):
            out = orig_generate(prompts)
            if trainer.model.training:
                ids, tool_mask = out[1], out[2]
                lens = [sum(m) for m in tool_mask] if tool_mask is not None else [len(c)
                                                                                   for c in ids]
                rec.gens.append({"G": float(sum(lens)), "L": float(max(lens)),
                                 "all_completion_tokens": sum(len(c) for c in ids),
                                 "tool_tokens": 0 if tool_mask is None else sum(
                                     m.count(0) for m in tool_mask)})
            return out

        def _generate_and_score_completions(inputs):
            out = orig_gsc(inputs)
            if trainer.model.training:
                mask = out["completion_mask"]
                if "tool_mask" in out:
                    mask = mask * out["tool_mask"]
                rec.gens[-1]["N"] = float(mask.sum())
            return out

        trainer._generate = _generate
        trainer._generate_and_score_completions = _generate_and_score_completions


class Spy:
    """Forwards to a real eerl.Session and records the order of calls: phase names begun, "|"
    at each update end (work: the update_end arguments)."""

    def __init__(self, s):
        self.s, self.calls, self.work = s, [], []

    def phase_begin(self, name, pool=None):
        self.calls.append(name)
        return self.s.phase_begin(name, pool)

    def phase_end(self, name, pool=None):
        return self.s.phase_end(name, pool)

    def update_end(self, **kw):
        self.calls.append("|")
        self.work.append(kw)
        return self.s.update_end(**kw)

    def metrics(self):
        return self.s.metrics()


class StandinVLLM:
    """In place of trl.generation.vllm_generation.VLLMGeneration (vLLM needs CUDA): generate()
    samples with the trainer's own model inside the profiler TRL passes, and returns the sampled
    tokens' log-probs as vLLM does; sync_weights() counts calls."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.syncs = 0

    def sync_weights(self):
        self.syncs += 1

    def generate(self, prompts, images, num_generations, profiler=None):
        import torch

        t = self.trainer
        model = t.accelerator.unwrap_model(t.model)
        completions, logprobs = [], []
        with profiler, torch.no_grad():
            for ids in prompts:
                x = torch.tensor([ids])
                y = model.generate(x, attention_mask=torch.ones_like(x), do_sample=True,
                                   max_new_tokens=MAX_COMPLETION, pad_token_id=0,
                                   eos_token_id=1)[0, len(ids):].tolist()
                if 1 in y:
                    y = y[:y.index(1) + 1]
                full = torch.tensor([ids + y])
                lp = torch.log_softmax(model(full).logits[0, len(ids) - 1:-1].float(), -1)
                completions.append(y)
                logprobs.append([[float(lp[i, tok])] for i, tok in enumerate(y)])
        return prompts, completions, logprobs, None


def use_standin_vllm(trainer):
    """Points TRL's use_vllm code path at StandinVLLM (set after construction, which would
    otherwise import vLLM)."""
    trainer.use_vllm = True
    trainer.vllm_generation = StandinVLLM(trainer)
    trainer._last_loaded_step = -1
    trainer.vllm_importance_sampling_correction = True


def rollout_with_env_tokens(prompts, trainer):
    """A rollout_func (TRL's custom-rollout hook) that returns env_mask: each completion has
    2 tokens of environment feedback (mask 0) after its first token; one in four completions is
    cut at MAX_COMPLETION without EOS (truncated: masked out of the loss by
    mask_truncated_completions)."""
    tok = trainer.processing_class
    out = {"prompt_ids": [], "completion_ids": [], "logprobs": None, "env_mask": []}
    for k, p in enumerate(prompts):
        ids = tok(p)["input_ids"]
        n = 3 + (k % 4)
        body = [2 + (k + i) % len(WORDS) for i in range(n)]
        if k % 4 == 3:
            body = (body * MAX_COMPLETION)[:MAX_COMPLETION]  # truncated
            mask = [1] + [0, 0] + [1] * (len(body) - 3)
        else:
            body = body + [1]  # ends with EOS
            mask = [1] + [0, 0] + [1] * (len(body) - 3)
        out["prompt_ids"].append(ids)
        out["completion_ids"].append(body)
        out["env_mask"].append(mask)
    return out


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    """torchrun worker: rank 0 holds the job's one eerl.Session over both GPUs of the node;
    every rank runs the same install line (a no-op where the session is None)."""
    import eerl
    from eerl.integrations import trl as eerl_trl
    from eerl.integrations._common import IntegrationError

    out = os.environ["TRL_TINY_OUT"]
    rank = int(os.environ["RANK"])
    t = trainer(os.environ["TRL_TINY_MODEL"], os.path.join(out, "run"), max_steps=2)
    rec = Record(t)
    result = {"rank": rank, "world": t.accelerator.num_processes}
    # The lines docs/integrations/trl.md gives.
    session = None
    if t.accelerator.is_main_process:
        session = eerl.Session(mode="colocated", pools={"generation": [0, 1], "training": [0, 1]},
                               trace=os.path.join(out, "eerl-run.jsonl"), observe_only=True)
        session = Spy(session)
    else:
        try:
            eerl_trl.install(object.__new__(Spy), t)
        except IntegrationError as e:
            result["refused"] = str(e)
    train_warning_free(eerl_trl.install(session, t), t)
    if session is not None:
        result["calls"] = session.calls
        session.s.close()
    result["gens"] = rec.gens
    with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
        json.dump(result, f)


def train_warning_free(hook, t):
    """t.train() with any RuntimeWarning (eerl's among them) an error: a good run gives none. The
    hook is uninstalled after, whatever happened."""
    import warnings
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            t.train()
    finally:
        hook.uninstall()


def main_nodes():
    """Worker of a two-node torchrun job on one machine (two torchrun launches, --nnodes 2, one
    process each; each "node" has its own eerld, named by its $EERL_SOCKET, and its own GPUs in
    CUDA_VISIBLE_DEVICES, by UUID): global rank 0 holds the job's one MultiNodeSession; the
    other node's local rank 0 serves it from a thread while it trains. These are the lines
    docs/integrations/trl.md gives for several nodes."""
    import datetime
    import threading

    from eerl import multinode
    from eerl.integrations import trl as eerl_trl

    out = os.environ["TRL_TINY_OUT"]
    t = trainer(os.environ["TRL_TINY_MODEL"], os.path.join(out, "run"), max_steps=2)
    rec = Record(t)
    acc = t.accelerator
    result = {"rank": acc.process_index, "world": acc.num_processes}

    recs = multinode.torch_gather_gpus(devices=[acc.local_process_index])  # every process
    leaders = multinode.node_leaders(timeout=datetime.timedelta(hours=2))   # every process
    session, ad, server = None, None, None
    if int(os.environ["LOCAL_RANK"]) == 0:
        ad = multinode.TorchDistributedAdapter(group=leaders)  # this node's eerld ($EERL_SOCKET)
        if ad.is_driver:                                        # global rank 0
            pools = ad.locate({"generation": recs, "training": recs})
            session = multinode.MultiNodeSession(ad, mode="colocated", pools=pools,
                                                 trace=os.path.join(out, "eerl-run.jsonl"))
            result["pools"] = {k: {str(n): g for n, g in v.items()} for k, v in pools.items()}
            session = Spy(session)  # the test's record of the calls (not in the doc)
        else:
            server = threading.Thread(target=ad.serve, name="eerl-node", daemon=True)
            server.start()
    train_warning_free(eerl_trl.install(session, t), t)
    if session is not None:
        result["calls"] = session.calls
        session.s.close()
        ad.close()                                              # the serving threads return
    if server is not None:
        server.join()

    result["gens"] = rec.gens
    with open(os.path.join(out, "rank%d.json" % acc.process_index), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main_nodes() if os.environ.get("TRL_TINY_NODES") else main()
