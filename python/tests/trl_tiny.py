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


def build_model(path, vllm=False):
    """The tiny Llama and its tokenizer, saved to path. vllm: the size vLLM's CPU attention
    takes (head_dim 64; it refuses 16), 2 layers of hidden size 128, bfloat16, and a chat
    template and response schema (AsyncGRPOTrainer's prompts are conversations)."""
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
    size = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=2, max_position_embeddings=64)
    if vllm:
        size = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                    num_attention_heads=2, num_key_value_heads=2, head_dim=64,
                    max_position_embeddings=256)
        tok.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
        # how TRL's rollout worker reads a response back into a message (a known template's
        # schema otherwise): all of it is content
        tok.response_schema = {"x-regex": r"^(?P<content>[\s\S]*?)(?:<eos>)?$",
                               "type": "object", "properties": {
                                   "role": {"const": "assistant"}, "content": {"type": "string"}}}
    cfg = LlamaConfig(vocab_size=len(vocab), pad_token_id=0, eos_token_id=1, bos_token_id=None,
                      **size)
    model = LlamaForCausalLM(cfg)
    if vllm:
        model = model.to(torch.bfloat16)
    model.save_pretrained(path)
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
    callbacks = extra.pop("callbacks", None)
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
                           model_dir), rollout_func=rollout_func, callbacks=callbacks)


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

    def close(self):
        return self.s.close()


SPIES = []


def spy_on(module, name):
    """Makes module.name (a session class) build sessions wrapped in a Spy, kept in SPIES: the
    test's record of the calls eerl's hook makes."""
    import functools
    real = getattr(module, name)

    @functools.wraps(real)  # its signature, which EerlCallback checks keywords against
    def make(*args, **kwargs):
        SPIES.append(Spy(real(*args, **kwargs)))
        return SPIES[-1]

    setattr(module, name, make)


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
    """torchrun worker, every rank the same line: rank 0 holds the job's one eerl.Session over
    the GPUs of both ranks (CUDA_VISIBLE_DEVICES: the stand-in node's UUIDs, one per rank)."""
    import eerl
    from eerl.integrations import trl as eerl_trl
    from eerl.integrations._common import IntegrationError

    out = os.environ["TRL_TINY_OUT"]
    rank = int(os.environ["RANK"])
    spy_on(eerl, "Session")
    cb = eerl_trl.EerlCallback(trace=os.path.join(out, "eerl-run.jsonl"), observe_only=True)
    t = trainer(os.environ["TRL_TINY_MODEL"], os.path.join(out, "run"), max_steps=2,
                callbacks=[cb])                                    # the line
    rec = Record(t)
    result = {"rank": rank, "world": t.accelerator.num_processes}
    if not t.accelerator.is_main_process:  # the explicit form keeps its session in rank 0
        try:
            eerl_trl.install(object.__new__(Spy), t)
        except IntegrationError as e:
            result["refused"] = str(e)
    train_warning_free(t)
    if SPIES:
        result["calls"] = SPIES[0].calls
        result["pools"] = cb.pools
    result["gens"] = rec.gens
    with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
        json.dump(result, f)


def train_warning_free(t):
    """t.train() with any RuntimeWarning (eerl's among them) an error: a good run gives none."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        t.train()


def main_nodes():
    """Worker of a two-node torchrun job on one machine (two torchrun launches, --nnodes 2, one
    process each; each "node" has its own eerld, named by its $EERL_SOCKET, and its own GPUs in
    CUDA_VISIBLE_DEVICES, by UUID), every rank the same line: global rank 0 holds the job's one
    MultiNodeSession; the other node's local rank 0 serves it from a thread while it trains."""
    from eerl import multinode
    from eerl.integrations import trl as eerl_trl

    out = os.environ["TRL_TINY_OUT"]
    spy_on(multinode, "MultiNodeSession")
    cb = eerl_trl.EerlCallback(trace=os.path.join(out, "eerl-run.jsonl"))
    t = trainer(os.environ["TRL_TINY_MODEL"], os.path.join(out, "run"), max_steps=2,
                callbacks=[cb])                                    # the line
    rec = Record(t)
    acc = t.accelerator
    result = {"rank": acc.process_index, "world": acc.num_processes}
    train_warning_free(t)
    if SPIES:
        result["calls"] = SPIES[0].calls
        result["pools"] = {k: {str(n): g for n, g in v.items()} for k, v in cb.pools.items()}
    result["gens"] = rec.gens
    with open(os.path.join(out, "rank%d.json" % acc.process_index), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main_nodes() if os.environ.get("TRL_TINY_NODES") else main()
