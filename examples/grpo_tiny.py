#!/usr/bin/env python3
"""A real, small GRPO loop in plain PyTorch, instrumented with eerl.

What it does, per RL update (the structure of verl / NeMo-RL GRPO, at toy scale):

  generation  the rollout copy of the policy samples GROUP responses for each of PROMPTS prompts,
              autoregressively with a key/value cache, until EOS or the response limit
  (reward)    a verifiable synthetic task scores every response by exact match (partial credit
              for matching positions, so a random policy has a gradient)
  logprob     the policy ("old") and a frozen reference model score the sampled tokens
  training    group-relative advantages (reward minus the group mean, over the group std), a
              clipped policy-gradient loss with a k3 KL penalty, token-mean over valid tokens,
              AdamW over mini-batches
  refit       the trained weights are copied into the rollout model (the weight update that a
              real framework sends to its inference engine); the policy version increases

The task: a prompt is [BOS, TASK, x1..xn, SEP] over a small alphabet; the answer is x copied
(COPY), reversed (REV), written twice (DOUBLE), or the decimal digits of n (COUNT), then EOS.
Prompt and answer lengths vary with n, so generation time varies from update to update, and with
the response limit some responses are cut off (truncated responses are left out of the loss by
default, as overlong filtering does: that is why valid tokens N differ from generated tokens G).

Token counts reported to eerl for each update:
  G  generated tokens (every sampled token, EOS included, truncated responses included)
  N  valid training tokens: sum of the response mask of the sequences the loss consumes
  L  tokens in the longest response

Configurations: --config tiny (CPU, seconds; the tests use it) and --config gpu (hundreds of
sequences per update, sequences from tens to about 2000 tokens, a response limit some responses
hit). Every knob can be overridden. Uses only stable PyTorch APIs (1.13 and 2.x).

    /usr/bin/python3 examples/grpo_tiny.py --config tiny --updates 3 --eerl off
    /usr/bin/python3 examples/grpo_tiny.py --config tiny --updates 5 --eerl observe --trace run.jsonl
    python examples/grpo_tiny.py --config gpu --device cuda --updates 50 --eerl on --trace run.jsonl
"""

import argparse
import contextlib
import copy
import gc
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS, SEP = 0, 1, 2, 3
TASKS = {"copy": 4, "reverse": 5, "double": 6, "count": 7}
SYM0 = 8  # first alphabet symbol; symbols SYM0 .. SYM0+alphabet-1 (the first ten are digits)

CONFIGS = {
    # CPU, a few seconds for a few updates: what the tests run.
    "tiny": dict(d_model=32, layers=2, heads=2, alphabet=10, prompts=4, group=4,
                 min_n=2, max_n=10, max_response=16, minibatch=8, lr=3e-3, eos_bias=1.5,
                 tasks="copy,reverse,count,double"),
    # A GPU: 40 prompts x 8 = 320 sequences per update, prompts of 7-963 tokens, responses up to
    # 1024 tokens (DOUBLE answers above 511 symbols cannot fit, and a policy that is slow to say
    # EOS runs into the limit), so sequences run from tens to ~2000 tokens. On one H200 an update
    # takes a few seconds (docs/validation/validation.md).
    "gpu": dict(d_model=512, layers=8, heads=8, alphabet=16, prompts=40, group=8,
                min_n=4, max_n=960, max_response=1024, minibatch=64, lr=1e-4, eos_bias=-3.0,
                tasks="copy,reverse,count,double"),
}


# ---- the task -------------------------------------------------------------------------------

def make_prompts(n_prompts, cfg, gen):
    """Returns a list of (prompt_tokens, answer_tokens) lists of ints."""
    tasks = [TASKS[t] for t in cfg["tasks"].split(",")]
    out = []
    for _ in range(n_prompts):
        task = tasks[int(torch.randint(len(tasks), (1,), generator=gen))]
        n = int(torch.randint(cfg["min_n"], cfg["max_n"] + 1, (1,), generator=gen))
        x = (torch.randint(cfg["alphabet"], (n,), generator=gen) + SYM0).tolist()
        if task == TASKS["copy"]:
            ans = list(x)
        elif task == TASKS["reverse"]:
            ans = x[::-1]
        elif task == TASKS["double"]:
            ans = x + x
        else:
            ans = [SYM0 + int(c) for c in str(n)]
        out.append(([BOS, task] + x + [SEP], ans + [EOS]))
    return out


def reward(response, answer):
    """1 for an exact match (EOS included); otherwise half the fraction of matching positions,
    over the longer of the two, so length errors cost too."""
    if response == answer:
        return 1.0
    m = sum(1 for a, b in zip(response, answer) if a == b)
    return 0.5 * m / max(len(response), len(answer))


# ---- the model --------------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, bias, cache=None, at=0):
        """x [B,T,d]; bias additive [B,1,T,S] over the S keys, or None for plain causal attention
        (right-padded rows: a real token never sees a pad); cache (k, v) [B,H,Smax,hd] is written
        at [at, at+T) and keys [0, at+T) are attended."""
        B, T, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(B, T, h, d // h).transpose(1, 2)
        k = k.view(B, T, h, d // h).transpose(1, 2)
        v = v.view(B, T, h, d // h).transpose(1, 2)
        if cache is not None and torch.is_tensor(at):
            # A static decode step (StaticDecoder): the position is a tensor and the whole cache
            # is attended; the bias keeps the keys not yet written closed.
            ck, cv = cache
            ck.index_copy_(2, at, k)
            cv.index_copy_(2, at, v)
            k, v = ck, cv
        elif cache is not None:
            ck, cv = cache
            ck[:, :, at:at + T] = k
            cv[:, :, at:at + T] = v
            k, v = ck[:, :, :at + T], cv[:, :, :at + T]
        if T == 1 or SDPA is None:
            # Decoding (one query against the cache) is a pair of batched matrix-vector products,
            # bound by reading the cache: done directly, it avoids the fused kernels' per-query
            # tiles, which leave the GPU mostly idle for a single query.
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
            att = att + (bias if bias is not None else causal_bias(T, x.device, att.dtype))
            y = F.softmax(att.float(), dim=-1).to(v.dtype) @ v
        elif bias is None:  # PyTorch 2.x: fused causal kernels, no [B,H,T,S] matrix
            y = SDPA(q, k, v, is_causal=True)
        else:
            y = SDPA(q, k, v, attn_mask=bias.to(q.dtype))
        y = y.transpose(1, 2).reshape(B, T, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab, d, layers, heads, max_len, eos_bias):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        self.max_len = max_len
        with torch.no_grad():
            # A random policy says EOS with probability ~1/vocab per token; eos_bias sets how
            # long its responses start out (negative: longer).
            self.head.bias[EOS] += eos_bias
            self.head.bias[PAD] = -1e4  # never sample PAD

    def forward(self, tokens, positions, bias, caches=None, at=0):
        x = self.tok(tokens) + self.pos(positions)
        for i, blk in enumerate(self.blocks):
            x = blk(x, bias, None if caches is None else caches[i], at)
        return self.head(self.ln(x))


NEG = -1e9
SDPA = getattr(F, "scaled_dot_product_attention", None)


def causal_bias(T, device, dtype=torch.float32):
    """Additive causal bias [1,1,T,T]."""
    ok = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    return torch.zeros(T, T, device=device, dtype=dtype).masked_fill(~ok, NEG)[None, None]


def full_bias(valid, dtype=torch.float32):
    """Causal + key-padding additive bias [B,1,T,T] from a [B,T] bool mask of real tokens."""
    T = valid.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool, device=valid.device).tril()
    ok = causal[None, None] & valid[:, None, None, :]
    # A padded query row sees nothing; let it see itself so softmax stays finite.
    ok = ok | torch.eye(T, dtype=torch.bool, device=valid.device)[None, None]
    return torch.zeros(ok.shape, device=valid.device, dtype=dtype).masked_fill(~ok, NEG)


class StaticDecoder:
    """One decode step with fixed shapes, as inference engines run decoding: the new token's
    query attends the whole cache [0, S) under a bias that opens one more key per step, and the
    cache slot is a tensor, so every step has the same kernels and, on a GPU, the step is captured
    once per batch as a CUDA graph and replayed (no per-kernel launch cost on the host, whose
    jitter would otherwise show in generation time). Without capture it runs eagerly (what the
    CPU tests check against the growing-prefix step)."""

    def __init__(self, model, caches, bias, lens, P, amp, graph):
        B = bias.shape[0]
        self.model, self.caches, self.P, self.amp = model, caches, P, amp
        self.lens = lens.clone()
        self.bias = bias.clone()
        self.bias[..., P:] = NEG  # keys P.. open one per step
        self.tok = torch.zeros(B, 1, dtype=torch.long, device=bias.device)
        self.pos = torch.zeros(B, 1, dtype=torch.long, device=bias.device)
        self.at = torch.zeros(1, dtype=torch.long, device=bias.device)
        self.graph, self.out = None, None
        self.want_graph = graph

    def reset(self, bias, lens, P):
        """A new batch of the same shapes: its key bias, prompt lengths and prompt width."""
        self.bias.copy_(bias)
        self.bias[..., P:] = NEG
        self.lens.copy_(lens)
        self.P = P

    def _ctx(self):
        if not self.amp:
            return contextlib.nullcontext()
        # No cast cache under capture: the weights' bf16 copies are made inside the step.
        return torch.autocast(device_type=self.bias.device.type, dtype=torch.bfloat16,
                              cache_enabled=self.want_graph is False)

    def _step(self):
        self.bias.index_fill_(3, self.at, 0.0)
        with self._ctx():
            return self.model(self.tok, self.pos, self.bias, self.caches, self.at)[:, -1]

    def step(self, nxt, t):
        """Logits after feeding token nxt [B] at decode step t (cache slot P + t)."""
        self.tok.copy_(nxt[:, None])
        torch.add(self.lens, t, out=self.pos[:, 0])
        self.at.fill_(self.P + t)
        if not self.want_graph:
            return self._step()
        if self.graph is None:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up off the capture (writes the same slot)
                for _ in range(2):
                    self._step()
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                self.out = self._step()
            self.graph = g
        self.graph.replay()
        return self.out


# The static decoder of the last (model, batch, cache shape): a run whose shapes do not change
# (cache_len fixed, the same number of sequences every update) builds its cache and captures its
# CUDA graph once, as an inference engine does at start-up, instead of once per update. Weights
# are refit in place, so the graph reads the new ones; cache slots left from the last update are
# closed by the bias until rewritten.
_DECODERS = {}


def sample(model, prompts, max_response, device, amp, decode="eager", cache_len=0):
    """Samples one response per prompt with a key/value cache. prompts: list of token lists.
    decode: "eager" (attend the growing prefix), "static" (StaticDecoder) or "graph"
    (StaticDecoder as a CUDA graph). cache_len: the least cache row length (0: what these
    prompts need). Returns (responses as token lists, truncated flags)."""
    if device.type != "cuda":
        return _sample(model, prompts, max_response, device, amp, decode, cache_len)
    # The end-of-generation events, the capture's side stream and the graph belong to the
    # current CUDA device: made on another one (cuda:0 while decoding on cuda:1), the events
    # did not wait for this device's flags and generation stopped on stale ones, at a fraction
    # of the work (an H200 run on cuda:1 "decoded" 1024 steps in 1 s instead of 16 s).
    with torch.cuda.device(device):
        return _sample(model, prompts, max_response, device, amp, decode, cache_len)


@torch.no_grad()
def _sample(model, prompts, max_response, device, amp, decode, cache_len):
    B = len(prompts)
    P = max(len(p) for p in prompts)
    # The cache's row length is rounded up to a multiple of 64 (the extra keys stay closed): on an
    # H200 the batched products over the cache ran 1.6-1.8x slower when it was not a multiple
    # of 8 (docs/validation/validation.md), which made generation time depend on the longest prompt's
    # length modulo 8 rather than on the work. The caller may fix it for the whole run (the
    # longest prompt the task can make plus the response limit), as an inference engine sizes
    # its cache once: then every update decodes the same shapes.
    S = -(-max(P + max_response, cache_len) // 64) * 64
    tokens = torch.full((B, P), PAD, dtype=torch.long)
    valid = torch.zeros(B, S, dtype=torch.bool)
    for i, p in enumerate(prompts):  # left padding: every prompt ends at column P-1
        tokens[i, P - len(p):] = torch.tensor(p)
        valid[i, P - len(p):] = True
    valid[:, P:] = True
    tokens, valid = tokens.to(device), valid.to(device)
    lens = torch.tensor([len(p) for p in prompts], device=device)
    pos = (torch.arange(P, device=device)[None] - (P - lens)[:, None]).clamp(min=0)
    d = model.tok.embedding_dim
    h = model.blocks[0].heads
    dtype = torch.bfloat16 if amp else torch.float32
    key = (id(model), B, h, S, d, str(device), dtype, decode)
    dec = _DECODERS.get(key) if decode in ("static", "graph") else None
    if dec is not None:
        caches = dec.caches  # this shape's decoder again: its cache, its captured graph
    else:
        caches = [(torch.zeros(B, h, S, d // h, device=device, dtype=dtype),
                   torch.zeros(B, h, S, d // h, device=device, dtype=dtype)) for _ in model.blocks]
    out = torch.full((B, max_response), PAD, dtype=torch.long, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    length = torch.full((B,), max_response, dtype=torch.long, device=device)
    # Whether every sequence has ended: on a CPU, asked after each step. On a GPU, asking waits
    # for it, so each step queues a copy of the flag into pinned host memory behind an event and
    # reads the flag queued lag - 1 (7) steps earlier: the host stays at most that far ahead of
    # the GPU without ever draining its queue, and generation always runs lag - 1 steps past the
    # longest response, so its time follows L (a check every k steps would add 0 to k - 1 steps
    # that the token counts cannot see). A slot is rewritten only after its last copy was waited
    # for (one step earlier).
    lag = 1 if device.type != "cuda" else 8
    if lag > 1:
        flags = torch.zeros(lag, dtype=torch.bool).pin_memory()
        events = [torch.cuda.Event() for _ in range(lag)]
    # One additive key bias for the whole decode, [B,1,1,S]: each step attends a prefix of it.
    bias = torch.zeros(B, 1, 1, S, device=device, dtype=dtype).masked_fill(
        ~valid[:, None, None, :], NEG)
    if dec is not None:
        dec.reset(bias, lens, P)
    elif decode in ("static", "graph"):
        dec = StaticDecoder(model, caches, bias, lens, P, amp, decode == "graph")
        _DECODERS.clear()  # one decoder at a time: a cache is large
        _DECODERS[key] = dec
    with autocast(device, amp):
        logits = model(tokens, pos, full_bias(valid[:, :P], dtype), caches, 0)[:, -1]
        for t in range(max_response):
            nxt = torch.multinomial(F.softmax(logits.float(), dim=-1), 1)[:, 0]
            nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
            out[:, t] = nxt
            ended = (~done) & (nxt == EOS)
            length = torch.where(ended, torch.full_like(length, t + 1), length)
            done = done | ended
            if t + 1 == max_response:
                break
            if lag == 1:
                if bool(done.all()):
                    break
            else:  # the extra steps after the last EOS only sample PAD for finished rows
                flags[t % lag].copy_(done.all(), non_blocking=True)
                events[t % lag].record()
                if t >= lag - 1:
                    events[(t + 1) % lag].synchronize()
                    if bool(flags[(t + 1) % lag]):
                        break
            if dec is not None:
                logits = dec.step(nxt, t)
            else:
                logits = model(nxt[:, None], (lens + t)[:, None], bias[..., :P + t + 1], caches,
                               P + t)[:, -1]
    out, length, done = out.cpu(), length.cpu(), done.cpu()
    return [out[i, :length[i]].tolist() for i in range(B)], (~done).tolist()


def autocast(device, amp):
    if not amp:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def pack(prompts, responses, idx, device, pad_to=1, adv=None, max_pos=None):
    """Right-padded [prompt + response] rows for the sequences idx, with the response mask over
    the positions of response tokens (the loss's targets); the row length is rounded up to a
    multiple of pad_to (fewer distinct shapes for the kernels and the allocator), and positions
    past max_pos (the model's last) are given max_pos: only padding sits there, and with right
    padding under causal attention no real token sees it. With adv, the rows' advantages [B, 1]
    come too. Built on the host (pinned for a GPU) and copied without waiting: a copy from
    pageable memory would make the host wait for the GPU's queue."""
    seqs = [prompts[i] + responses[i] for i in idx]
    T = -(-max(len(s) for s in seqs) // pad_to) * pad_to
    tokens = torch.full((len(idx), T), PAD, dtype=torch.long)
    rmask = torch.zeros(len(idx), T, dtype=torch.bool)
    for r, (i, s) in enumerate(zip(idx, seqs)):
        tokens[r, :len(s)] = torch.tensor(s)
        rmask[r, len(prompts[i]):len(s)] = True
    host = [tokens, rmask] + ([adv[idx][:, None].float()] if adv is not None else [])
    if device.type == "cuda":
        host = [t.pin_memory() for t in host]
    dev = [t.to(device, non_blocking=True) for t in host]
    tokens, rmask = dev[0], dev[1]
    valid = tokens != PAD
    pos = torch.arange(T, device=device)
    if max_pos is not None:
        pos = pos.clamp(max=max_pos)
    pos = pos[None].expand(len(idx), T)
    return (tokens, pos, valid, rmask) + ((dev[2],) if adv is not None else ())


def token_logprobs(model, tokens, pos, valid, amp):
    """log p(token_j | tokens_<j) for j >= 1, aligned to positions 1..T-1 ([B, T-1])."""
    # Rows are right-padded, so plain causal attention is exact for every real token; without
    # PyTorch 2's fused kernels the explicit bias also keeps pad rows finite.
    bias = None if SDPA is not None else full_bias(valid)
    with autocast(tokens.device, amp):
        logits = model(tokens, pos, bias)
    lp = F.log_softmax(logits[:, :-1].float(), dim=-1)
    return lp.gather(-1, tokens[:, 1:, None])[..., 0]


def batches(order, size):
    for i in range(0, len(order), size):
        yield order[i:i + size]


# ---- eerl, optional ---------------------------------------------------------------------------

def eerl_gpus(args):
    """The GPU indices eerl meters (--eerl-gpus; default GPU 0)."""
    return [int(g) for g in args.eerl_gpus.split(",")] if args.eerl_gpus else [0]


def import_eerl():
    """The installed eerl package (pip install . or the wheel); a checkout's python/ only where
    none is installed, so an installed package, which carries libeerl, always wins."""
    try:
        import eerl
        return eerl
    except ImportError as e:
        missing = e
    here = os.path.dirname(os.path.abspath(__file__))
    pkg = os.path.join(os.path.dirname(here), "python")
    if not os.path.isdir(os.path.join(pkg, "eerl")):
        raise missing
    sys.path.append(pkg)  # run from a checkout without installing the package
    import eerl
    return eerl


def open_session(args):
    if args.eerl == "off":
        return None
    eerl = import_eerl()
    gpus = eerl_gpus(args)
    if args.eerl_mode == "colocated":
        pools = {"generation": gpus, "training": gpus}
    else:
        half = max(1, len(gpus) // 2)
        pools = {"generation": gpus[:half], "training": gpus[half:] or gpus[:half]}
    # The trace's run line: eerl analyze pairs governor (observe-only) and controller runs by seed.
    info = {"workload": "grpo_tiny/" + args.config, "seed": args.seed,
            "role": "governor" if args.eerl == "observe" else "controller"}
    return eerl.Session(mode=args.eerl_mode, pools=pools, allowed_loss=args.allowed_loss,
                        observe_only=(args.eerl == "observe"), trace=args.trace, run_info=info)


def open_reference(args):
    """A reader of the NVML energy counters (millijoules) of the GPUs eerl meters, through pynvml
    (nvidia-ml-py), independently of eerl's own NVML code. Read-only queries."""
    try:
        import pynvml
    except ImportError:
        sys.exit("grpo_tiny: --nvml-reference needs pynvml (the nvidia-ml-py package)")
    pynvml.nvmlInit()
    gpus = eerl_gpus(args)
    hs = [pynvml.nvmlDeviceGetHandleByIndex(g) for g in gpus]
    return lambda: [pynvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in hs]


# ---- the loop ---------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...: where generation "
                    "runs (and everything else, unless --train-device)")
    ap.add_argument("--train-device", default=None,
                    help="where log-probs and training run, e.g. cuda:1 for a disaggregated run "
                         "(default: --device); refit copies the weights across")
    ap.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                    help="stop after the update during which this much wall time has passed")
    ap.add_argument("--nvml-reference", action="store_true",
                    help="also read each eerl GPU's NVML energy counter through pynvml at every "
                         "update boundary (read-only), an independent check of eerl's meter: "
                         "the per-update log gets ref_energy_mj")
    ap.add_argument("--gc", choices=["manual", "auto"], default="manual",
                    help="manual (default): Python's cyclic garbage collector runs once per "
                         "update, between updates, over the objects made since start-up (those "
                         "are frozen), as Megatron-LM's --manual-gc does, rather than whenever "
                         "allocation counts trigger it, inside a phase whose time it lengthens; "
                         "auto: Python's default")
    ap.add_argument("--updates", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eerl", choices=["off", "observe", "on"], default="off",
                    help="off: no eerl; observe: measure and trace, never change clocks; "
                         "on: eerl picks the clocks")
    ap.add_argument("--eerl-mode", choices=["colocated", "disaggregated"], default="colocated")
    ap.add_argument("--eerl-gpus", default="", help="GPU indices eerl manages, e.g. 0,1 "
                    "(default: 0)")
    ap.add_argument("--allowed-loss", type=float, default=0.02)
    ap.add_argument("--trace", default=None, help="eerl trace file (JSON lines)")
    ap.add_argument("--log", default=None, help="write one JSON line of figures per update here")
    ap.add_argument("--amp", choices=["auto", "on", "off"], default="auto",
                    help="bfloat16 autocast (auto: on for CUDA)")
    ap.add_argument("--decode", choices=["auto", "eager", "static", "graph"], default="auto",
                    help="decode step: eager (attend the growing prefix), static (fixed shapes, "
                         "whole cache under a bias), graph (static, captured as a CUDA graph); "
                         "auto: graph on CUDA, eager otherwise")
    ap.add_argument("--no-mask-truncated", action="store_true",
                    help="train on truncated responses too (default: leave them out of the loss)")
    for k, v in CONFIGS["tiny"].items():
        ap.add_argument("--" + k.replace("_", "-"), type=type(v), default=None)
    args = ap.parse_args(argv)
    cfg = dict(CONFIGS[args.config])
    for k in cfg:
        if getattr(args, k) is not None:
            cfg[k] = getattr(args, k)
    if args.updates < 1:
        ap.error("--updates must be at least 1, not %d" % args.updates)
    if cfg["min_n"] < 1 or cfg["max_n"] < cfg["min_n"]:
        ap.error("need 1 <= --min-n <= --max-n, got %d and %d" % (cfg["min_n"], cfg["max_n"]))
    if cfg["alphabet"] < 10:
        ap.error("--alphabet must be at least 10 (COUNT answers use ten digits), not %d"
                 % cfg["alphabet"])
    if cfg["group"] < 2:
        ap.error("--group must be at least 2 (advantages are relative to the group), not %d"
                 % cfg["group"])
    if args.time_budget is not None and not args.time_budget > 0:
        ap.error("--time-budget must be a positive number of seconds, not %s" % args.time_budget)
    devices = []
    for opt_name, name in (("--device", args.device),
                           ("--train-device", args.train_device or args.device)):
        try:
            dev = torch.device(name)
        except RuntimeError as e:
            ap.error("%s %r: %s" % (opt_name, name, e))
        if dev.type == "cuda" and not torch.cuda.is_available():
            ap.error("%s %s: CUDA is not available to this PyTorch" % (opt_name, name))
        if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
            ap.error("%s %s: this machine has %d CUDA device(s)"
                     % (opt_name, name, torch.cuda.device_count()))
        devices.append(dev)
    device, tdev = devices
    if device.type != tdev.type:
        ap.error("--device %s and --train-device %s must both be CPU or both CUDA"
                 % (args.device, args.train_device))
    amp = args.amp == "on" or (args.amp == "auto" and device.type == "cuda")
    decode = args.decode if args.decode != "auto" else (
        "graph" if device.type == "cuda" else "eager")
    if decode == "graph" and device.type != "cuda":
        ap.error("--decode graph needs a CUDA --device, not %s" % device)

    if device.type == "cuda":
        torch.cuda.set_device(device)  # streams and events made without a device go here
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    vocab = SYM0 + cfg["alphabet"]
    max_len = 3 + cfg["max_n"] + cfg["max_response"] + 1
    policy = TinyLM(vocab, cfg["d_model"], cfg["layers"], cfg["heads"], max_len,
                    cfg["eos_bias"]).to(tdev)
    rollout = copy.deepcopy(policy).to(device).eval()  # the "inference engine"'s weights
    ref = copy.deepcopy(policy).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    # The fused optimizer step on a GPU: a few kernels rather than a few per parameter tensor.
    fused = {"fused": True} if tdev.type == "cuda" else {}
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg["lr"], weight_decay=0.0, **fused)
    # Training rows rounded up to a multiple of 64 tokens on a GPU (fewer distinct shapes).
    pad_to = 64 if tdev.type == "cuda" else 1
    cache_len = 3 + cfg["max_n"] + cfg["max_response"]  # the longest prompt + the limit
    clip, kl_coef = 0.2, 0.01
    version = 0
    nparams = sum(p.numel() for p in policy.parameters())
    print("grpo_tiny: config %s, %d parameters, generation on %s, training on %s, %d x %d "
          "sequences per update, eerl %s" % (args.config, nparams, device, tdev, cfg["prompts"],
                                             cfg["group"], args.eerl), flush=True)

    ref_read = open_reference(args) if args.nvml_reference else None
    try:
        sess = open_session(args)
    except Exception as e:  # eerl.EerlError: say what is missing in one line, no traceback
        if type(e).__name__ not in ("EerlError", "LibraryNotFound"):
            raise
        hint = ""
        if getattr(e, "name", "") == "EERL_ENODRIVER":
            hint = ("; --eerl needs an NVIDIA GPU and driver (or an eerld serving simulated GPUs: "
                    "eerld --devices twin:h100x1 --socket S, then EERL_SOCKET=S), or run with "
                    "--eerl off")
        print("grpo_tiny: --eerl %s: %s%s" % (args.eerl, e, hint), file=sys.stderr, flush=True)
        return 2
    phase = sess.phase if sess is not None else (lambda name: contextlib.nullcontext())
    logf = open(args.log, "w") if args.log else None

    def sync():
        for dev in {device, tdev}:
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)

    start = time.monotonic()
    ref_prev = ref_read() if ref_read else None
    try:
        if args.gc == "manual":
            gc.collect()
            gc.freeze()
            gc.disable()
        for update in range(1, args.updates + 1):  # numbered from 1, as eerl numbers them
            t0 = time.perf_counter()
            m0 = time.monotonic()
            items = make_prompts(cfg["prompts"], cfg, gen)
            prompts = [p for p, _ in items for _ in range(cfg["group"])]
            answers = [a for _, a in items for _ in range(cfg["group"])]

            with phase("generation"):
                try:
                    responses, truncated = sample(rollout, prompts, cfg["max_response"], device,
                                                  amp, decode, cache_len)
                except RuntimeError as e:
                    if decode != "graph":
                        raise
                    print("grpo_tiny: CUDA graph decoding failed (%s); decoding eagerly from now"
                          % e, flush=True)
                    decode = "eager"
                    responses, truncated = sample(rollout, prompts, cfg["max_response"], device,
                                                  amp, decode, cache_len)
                sync()
            t_gen, m_gen = time.perf_counter(), time.monotonic()

            rewards = torch.tensor([reward(r, a) for r, a in zip(responses, answers)])
            grouped = rewards.view(cfg["prompts"], cfg["group"])
            adv = (grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-6)
            adv = adv.view(-1)
            use = [i for i in range(len(prompts))
                   if args.no_mask_truncated or not truncated[i]]
            G = sum(len(r) for r in responses)
            L = max(len(r) for r in responses)
            N = sum(len(responses[i]) for i in use)  # the response mask summed below agrees
            # Longest first, so mini-batches hold sequences of similar length.
            order = sorted(use, key=lambda i: -(len(prompts[i]) + len(responses[i])))

            with phase("logprob"):
                # Every mini-batch is packed and queued once, here, and the training phase uses
                # the same tensors; nothing in either phase waits for the GPU until its end (the
                # sums below stay on the device), so the phases' times follow the GPU's work
                # rather than the host's. Each mini-batch's scoring is queued as soon as it is
                # packed, so the host packs the next one while the GPU scores this one (the
                # host's share and its jitter hide behind the GPU's work, as a data loader's do).
                mbs, old, refl, padded_tokens = [], [], [], 0
                with torch.no_grad():
                    for idx in batches(order, cfg["minibatch"]):
                        mbs.append(pack(prompts, responses, idx, tdev, pad_to, adv,
                                        policy.max_len - 1))
                        tokens, pos, valid, _, _ = mbs[-1]
                        padded_tokens += tokens.numel()
                        old.append(token_logprobs(policy, tokens, pos, valid, amp))
                        refl.append(token_logprobs(ref, tokens, pos, valid, amp))
                sync()
            t_lp, m_lp = time.perf_counter(), time.monotonic()

            with phase("training"):
                sums = torch.zeros(3, device=tdev, dtype=torch.float64)  # mask, loss, kl
                policy.train()
                for j, (tokens, pos, valid, rmask, a) in enumerate(mbs):
                    m = rmask[:, 1:].float()
                    lp = token_logprobs(policy, tokens, pos, valid, amp)
                    ratio = torch.exp(lp - old[j])
                    pg = -torch.min(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a)
                    d = refl[j] - lp
                    kl = torch.exp(d) - d - 1  # k3 estimator, >= 0
                    loss = ((pg + kl_coef * kl) * m).sum() / m.sum().clamp(min=1)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
                    opt.step()
                    sums += torch.stack([m.sum(), loss.detach() * tokens.shape[0],
                                         (kl.detach() * m).sum()]).double()
                sync()
            n_mask, loss_sum, kl_sum = int(sums[0]), float(sums[1]), float(sums[2])
            del mbs, old, refl
            assert n_mask == N, (n_mask, N)
            t_train, m_train = time.perf_counter(), time.monotonic()

            with phase("refit"):
                rollout.load_state_dict(policy.state_dict())
                version += 1
                sync()
            t_end, m_end = time.perf_counter(), time.monotonic()

            if sess is not None and N > 0:
                sess.update_end(generated_tokens=G, valid_tokens=N, longest_response=L,
                                policy_version=version)
            elif sess is not None:
                print("update %d: every response was truncated (N = 0), not reported to eerl"
                      % update, flush=True)
            ref_now = ref_read() if ref_read else None
            t_gc = time.perf_counter()
            if args.gc == "manual":
                gc.collect()
            t_gc = time.perf_counter() - t_gc
            # The work scoring and training do: the rows' real tokens (prompt + response) and the
            # padded positions the kernels ran over (the packed shapes; no GPU read).
            score_tokens = sum(len(prompts[i]) + len(responses[i]) for i in use)
            rec = {
                "update": update, "G": G, "N": N, "L": L, "version": version,
                "reward": round(float(rewards.mean()), 4),
                "exact": round(float((rewards == 1.0).float().mean()), 4),
                "truncated": sum(truncated),
                "prompt_max": max(len(p) for p in prompts),
                "score_tokens": score_tokens, "padded_tokens": padded_tokens,
                "loss": round(loss_sum / max(1, len(use)), 5),
                "kl": round(kl_sum / max(1, N), 6),
                "t_gen": round(t_gen - t0, 4), "t_logprob": round(t_lp - t_gen, 4),
                "t_train": round(t_train - t_lp, 4), "t_refit": round(t_end - t_train, 4),
                "t_update": round(t_end - t0, 4), "t_gc": round(t_gc, 4),
                # CLOCK_MONOTONIC at the phase boundaries (begin, generation end, log-prob end,
                # training end, refit end), to line the update up with other readings.
                "mono": [round(x, 6) for x in (m0, m_gen, m_lp, m_train, m_end)],
            }
            if ref_now is not None:
                rec["ref_energy_mj"] = [b - a for a, b in zip(ref_prev, ref_now)]
                ref_prev = ref_now
            if sess is not None:
                rec.update({k: v for k, v in sess.metrics().items()
                            if isinstance(v, (int, float, str))})
            print(json.dumps(rec), flush=True)
            if logf:
                logf.write(json.dumps(rec) + "\n")
                logf.flush()
            if args.time_budget is not None and time.monotonic() - start >= args.time_budget:
                print("grpo_tiny: time budget of %g s spent after %d update(s)"
                      % (args.time_budget, update), flush=True)
                break
    finally:
        if args.gc == "manual":
            gc.enable()
            gc.unfreeze()
        if logf:
            logf.close()
        if sess is not None:
            sess.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
