#!/usr/bin/env python3
"""TRL's GRPOTrainer on a randomly initialised model, with eerl observing through
eerl.integrations.trl (as docs/integrations/trl.md tells a user), Zeus's ZeusMonitor measuring the
same windows in the same process, and an independent pynvml reading of the NVML energy counter at
every update boundary. Read-only on the GPU: eerl runs observe-only, Zeus and pynvml only read.

    python3 tools/h200/trl_grpo.py --out RUNDIR [--size gpu|tiny] [--seconds S | --stop-by T]
                                   [--updates N]

The model is a Llama-architecture causal LM built from a config (--size gpu: 8 layers, hidden
2048, about 540 M parameters; tiny: 2 layers, hidden 64, for a CPU check) with random weights,
saved to a scratch folder with a word-level tokenizer built here (no download), so that TRL loads
the policy and its reference model the way it loads any checkpoint. Prompts are random words, all
of one length by default (with prompts of 16-64 words a probe on the H200 got a NaN gradient norm
at its first step, taken to come from left-padded query rows that attend to nothing; one length
also lets later updates reuse the first one's decode shapes); the reward is synthetic
(completions whose length is near --target-frac of the limit score higher). With --lengths LO:HI
(or LO:HI:STEP) each update's completion limit is drawn (seeded) from LO..HI in steps of 64 (or
STEP), the first update's
at HI so that later updates reuse its decode shapes: the work then varies from update to update
as a real run's does (a randomly initialised model rarely ends a completion early, so with one
limit every update generates about the same number of decode steps).
Generation is transformers' generate (TRL's default, no vLLM).

What the script adds around the run, and nothing inside TRL or the hook:
  * Zeus windows at eerl's own boundaries: the session's phase_begin / phase_end / update_end are
    wrapped on this session object so that, right after eerl's call returns, a ZeusMonitor window
    opens or closes (one per update, one per phase segment; Zeus's default sync_execution, a
    torch.cuda.synchronize, on a GPU) and, at each update end, pynvml reads the counter.
  * Costs on the training thread: eerl's own timing of its calls per update (eerl.Session's
    eerl/overhead_s), and exclusive wall and CPU time (time.thread_time) of eerl's calls
    (the session's C calls: marks, update end), of the hook's own Python (the ProfilingContext
    wrappers, the work counter, the callback), of Zeus's calls and of the reference reads; the CPU
    time of the threads eerl starts (its sampler), from /proc.

Writes to RUNDIR: trace.jsonl (eerl's), log.jsonl (one line per update: the counter reading after
eerl's update mark and its difference from the previous one's, Zeus's update and phase energies,
the boundary times, the costs; data/h200/trl-2026-12-01/README.md), trl-log.jsonl (TRL's
logged metrics per step), zeus.csv (ZeusMonitor's own log), costs.json (totals, thread CPU, what
was unavailable and why), run.json (the configuration, versions, parameter count).
"""
import argparse
import collections
import json
import os
import random
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

SIZES = {  # layers, hidden, intermediate, heads, kv heads, words in the vocabulary
    "gpu": dict(layers=8, hidden=2048, intermediate=8192, heads=16, kv_heads=16, words=1024),
    "tiny": dict(layers=2, hidden=64, intermediate=128, heads=4, kv_heads=4, words=256),
}


def say(*a):
    print("trl_grpo:", *a, flush=True)


# ---- exclusive-time accounting on the training thread ---------------------------------------

class Prof:
    """Exclusive wall and CPU time per category: a timed call's children (other timed calls
    inside it) are not counted in it, so nested wrappers add up without double counting."""

    def __init__(self):
        self.stack = []
        self.tot = collections.defaultdict(lambda: [0.0, 0.0, 0])  # wall s, cpu s, calls

    def wrap(self, cat, fn):
        prof = self

        def timed(*a, **k):
            prof.stack.append([time.perf_counter(), time.thread_time(), 0.0, 0.0])
            try:
                return fn(*a, **k)
            finally:
                t0, c0, cw, cc = prof.stack.pop()
                dw, dc = time.perf_counter() - t0, time.thread_time() - c0
                e = prof.tot[cat]
                e[0] += dw - cw
                e[1] += dc - cc
                e[2] += 1
                if prof.stack:
                    prof.stack[-1][2] += dw
                    prof.stack[-1][3] += dc
        timed.__wrapped__ = fn
        return timed

    def snapshot(self):
        return {k: list(v) for k, v in self.tot.items()}


def diff(a, b):
    """Per-category [wall, cpu, calls] of snapshot b minus snapshot a."""
    out = {}
    for k, v in b.items():
        w = a.get(k, [0.0, 0.0, 0])
        out[k] = [v[0] - w[0], v[1] - w[1], v[2] - w[2]]
    return out


def thread_cpu():
    """{tid: (name, CPU seconds)} of this process's threads: from /proc/self/task/TID/schedstat
    (nanoseconds on the CPU) where the kernel has it, else user + system time from .../stat
    (clock ticks, usually 10 ms)."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    base = "/proc/self/task"
    for tid in os.listdir(base):
        d = os.path.join(base, tid)
        try:
            with open(os.path.join(d, "comm")) as f:
                name = f.read().strip()
            try:
                with open(os.path.join(d, "schedstat")) as f:
                    cpu = int(f.read().split()[0]) / 1e9
            except OSError:
                with open(os.path.join(d, "stat")) as f:
                    st = f.read()
                fields = st[st.rindex(")") + 2:].split()
                cpu = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, ValueError, IndexError):
            continue
        out[int(tid)] = (name, cpu)
    return out


# ---- the model, tokenizer, data and reward ---------------------------------------------------

def build_checkpoint(a, dims, folder, torch, gpu):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

    specials = ["<pad>", "<eos>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials)}
    for i in range(dims["words"]):
        vocab["w%d" % i] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                     unk_token="<unk>", model_max_length=a.max_prompt * 2
                                     + a.max_completion)
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=dims["hidden"],
                      intermediate_size=dims["intermediate"], num_hidden_layers=dims["layers"],
                      num_attention_heads=dims["heads"], num_key_value_heads=dims["kv_heads"],
                      max_position_embeddings=a.max_prompt + a.max_completion + 64,
                      pad_token_id=0, eos_token_id=1, bos_token_id=None, tie_word_embeddings=False)
    torch.manual_seed(a.seed)
    dtype = torch.bfloat16 if gpu else torch.float32
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(folder)
    hf_tok.save_pretrained(folder)
    del model
    return params, len(vocab)


def prompts(a, n, words):
    rng = random.Random(a.seed)
    return [" ".join("w%d" % rng.randrange(words)
                     for _ in range(rng.randint(a.min_prompt, a.max_prompt))) for _ in range(n)]


def make_reward(target):
    def length_reward(prompts, completions, completion_ids, **kw):
        """Synthetic: 1 at the target completion length, falling linearly to 0 at the limit's
        distance from it."""
        return [1.0 - abs(len(c) - target) / float(target) for c in completion_ids]
    return length_reward


# ---- the run ----------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", choices=sorted(SIZES), default="gpu")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    ap.add_argument("--gpu", type=int, default=0, help="the GPU index (NVML and CUDA)")
    ap.add_argument("--seconds", type=float, default=None,
                    help="stop after the update that ends past this many seconds of training")
    ap.add_argument("--stop-by", type=float, default=None,
                    help="CLOCK_MONOTONIC time (s) by which training must end: no update starts "
                         "that would not, at 1.15 times the last update's length, end by then")
    ap.add_argument("--updates", type=int, default=1000, help="at most this many updates")
    ap.add_argument("--prompts", type=int, default=32, help="prompts per update")
    ap.add_argument("--generations", type=int, default=8, help="completions per prompt")
    ap.add_argument("--micro-batch", type=int, default=64, help="sequences per micro-batch")
    ap.add_argument("--min-prompt", type=int, default=32, help="words (= tokens) per prompt, "
                    "at least")
    ap.add_argument("--max-prompt", type=int, default=32, help="... and at most")
    ap.add_argument("--max-completion", type=int, default=1024)
    ap.add_argument("--lengths", default=None, metavar="LO:HI[:STEP]",
                    help="draw each update's completion limit from LO..HI (steps of STEP, "
                         "default 64; the first update at HI); HI replaces --max-completion")
    ap.add_argument("--target-frac", type=float, default=0.5,
                    help="the reward's best completion length, as a share of --max-completion")
    ap.add_argument("--beta", type=float, default=0.04,
                    help="KL coefficient (> 0: TRL builds a reference model: a log-prob phase)")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--zeus", choices=["auto", "off"], default="auto")
    ap.add_argument("--zeus-sync", choices=["auto", "on", "off"], default="auto",
                    help="ZeusMonitor's sync_execution (auto: Zeus's default, on, where CUDA is)")
    for k in ("layers", "hidden", "intermediate", "heads", "kv_heads", "words"):
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=None,
                        help="override the size's %s" % k)
    a = ap.parse_args()
    seqs = a.prompts * a.generations
    if seqs % a.micro_batch:
        sys.exit("trl_grpo: --prompts x --generations (%d) must be a multiple of --micro-batch "
                 "(%d)" % (seqs, a.micro_batch))
    limits = None
    if a.lengths is not None:
        try:
            parts = [int(x) for x in a.lengths.split(":")]
            lo, hi, step = (parts + [64])[:3] if len(parts) in (2, 3) else (None, None, None)
        except ValueError:
            lo = None
        if lo is None:
            sys.exit("trl_grpo: --lengths '%s' is not LO:HI or LO:HI:STEP (whole numbers)"
                     % a.lengths)
        if not 1 <= lo <= hi or step < 1:
            sys.exit("trl_grpo: --lengths '%s' needs 1 <= LO <= HI and STEP >= 1" % a.lengths)
        a.max_completion = hi
        limits = list(range(hi, lo - 1, -step))
    dims = dict(SIZES[a.size])
    for k in dims:
        if getattr(a, k) is not None:
            dims[k] = getattr(a, k)
    os.makedirs(a.out, exist_ok=True)
    t_start = time.monotonic()

    import torch
    gpu = (a.device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
    if gpu:
        torch.cuda.set_device(a.gpu)
    import datasets
    import transformers
    import trl
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.extras import profiling

    sys.path.insert(0, os.path.join(REPO, "python"))
    import eerl
    from eerl.integrations import trl as eerl_trl
    t_import = time.monotonic() - t_start

    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "trl": trl.__version__, "datasets": datasets.__version__,
                "eerl": getattr(eerl, "__version__", "?"), "python": sys.version.split()[0]}
    unavailable = {}

    # ---- Zeus and the independent counter reader ----------------------------------------
    zeus_mon, zeus_sync = None, False
    if a.zeus == "off":
        unavailable["zeus"] = "--zeus off"
    else:
        try:
            import zeus
            from zeus.monitor import ZeusMonitor
            versions["zeus"] = getattr(zeus, "__version__", None) or _dist_version("zeus")
            zeus_sync = {"on": True, "off": False, "auto": gpu}[a.zeus_sync]
            if zeus_sync and not gpu:
                sys.exit("trl_grpo: --zeus-sync on needs CUDA (Zeus synchronizes through "
                         "torch.cuda)")
            zeus_mon = ZeusMonitor(gpu_indices=[a.gpu], cpu_indices=[],
                                   log_file=os.path.join(a.out, "zeus.csv"))
            zeus_mon.begin_window("probe", sync_execution=zeus_sync)
            zeus_mon.end_window("probe", sync_execution=zeus_sync)
        except Exception as e:  # noqa: BLE001 - any failure: say so and run on without Zeus
            unavailable["zeus"] = "%s: %s" % (type(e).__name__, e)
            zeus_mon = None
    if zeus_mon is None:
        say("Zeus is unavailable (%s); the run continues without it" % unavailable["zeus"])

    ref_read = None
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(a.gpu)
        ref_read = lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h)  # noqa: E731
        ref_read()
        versions["nvidia-ml-py"] = _dist_version("nvidia-ml-py")
    except Exception as e:  # noqa: BLE001
        unavailable["reference"] = "%s: %s" % (type(e).__name__, e)
        ref_read = None
        say("the independent pynvml counter reading is unavailable (%s); the run continues "
            "without it" % unavailable["reference"])

    # ---- checkpoint, data, trainer -------------------------------------------------------
    scratch = tempfile.mkdtemp(prefix="trl-grpo-")
    ckpt = os.path.join(scratch, "model")
    params, vocab = build_checkpoint(a, dims, ckpt, torch, gpu)
    say("model: %.1f M parameters (%d layers, hidden %d, vocab %d), %s"
        % (params / 1e6, dims["layers"], dims["hidden"], vocab, "bf16 on cuda:%d" % a.gpu
           if gpu else "fp32 on the CPU"))
    n_prompts = a.prompts * (min(a.updates, 400) + 4)
    ds = datasets.Dataset.from_dict({"prompt": prompts(a, n_prompts, dims["words"])})
    target = max(1, int(round(a.target_frac * a.max_completion)))
    cfg = GRPOConfig(
        output_dir=os.path.join(scratch, "out"), per_device_train_batch_size=a.micro_batch,
        gradient_accumulation_steps=seqs // a.micro_batch, num_generations=a.generations,
        max_completion_length=a.max_completion, beta=a.beta, learning_rate=a.lr,
        max_steps=a.updates, logging_steps=1, report_to="none", save_strategy="no",
        seed=a.seed, bf16=gpu, use_cpu=not gpu, disable_tqdm=True, dataloader_num_workers=0,
        model_init_kwargs={"dtype": "bfloat16" if gpu else "float32"})
    trainer = GRPOTrainer(model=ckpt, reward_funcs=make_reward(target), args=cfg,
                          train_dataset=ds)

    # ---- eerl, as docs/integrations/trl.md tells a user (observe-only here) --------------
    before = thread_cpu()
    session = None
    if trainer.accelerator.is_main_process:          # one controller per job
        session = eerl.Session(mode="colocated",
                               pools={"generation": [a.gpu], "training": [a.gpu]},
                               observe_only=True, trace=os.path.join(a.out, "trace.jsonl"),
                               run_info={"seed": a.seed, "workload": "trl-grpo/%s" % a.size,
                                         "framework": "trl %s" % trl.__version__})
    if session is None:
        sys.exit("trl_grpo: this script runs one process (python3, not accelerate launch)")
    eerl_threads = {t: v for t, v in thread_cpu().items() if t not in before}
    t_open = time.monotonic()

    prof = Prof()
    state = {"update": 0, "ref0": None, "zeus_phase": {}, "open": set(), "t_prev": None,
             "snap": prof.snapshot(), "zeus_errors": 0, "t_train0": None, "log": None}
    log_f = open(os.path.join(a.out, "log.jsonl"), "w")

    def zeus_call(fn, *args, **kw):
        try:
            return prof.wrap("zeus", fn)(*args, **kw)
        except Exception as e:  # noqa: BLE001 - a Zeus failure must not stop the run
            state["zeus_errors"] += 1
            if state["zeus_errors"] <= 3:
                say("Zeus call failed: %s: %s" % (type(e).__name__, e))
            return None

    def ref_now():
        return prof.wrap("reference", ref_read)() if ref_read else None

    def start_update(ref=None):
        # the reference is continuous: an update starts at the previous one's end reading
        state["ref0"] = ref if ref is not None else ref_now()
        state["t_prev"] = time.monotonic()
        if zeus_mon is not None:
            zeus_call(zeus_mon.begin_window, "update", sync_execution=zeus_sync)
        state["zeus_begin"] = [state["t_prev"], time.monotonic()]  # Zeus's start read in here
        state["zeus_phase"] = {}

    s_begin = prof.wrap("eerl_session", session.phase_begin)
    s_end = prof.wrap("eerl_session", session.phase_end)
    s_upd = prof.wrap("eerl_session", session.update_end)
    s_met = prof.wrap("eerl_session", session.metrics)

    def phase_begin(name, pool=None):
        r = s_begin(name, pool)
        if state["ref0"] is None and state["t_prev"] is None:
            start_update()  # the first mark opens update 0 (eerl's t_start)
        if zeus_mon is not None:
            key = "phase:%s" % name
            if key in state["open"]:
                zeus_call(zeus_mon.end_window, key, sync_execution=zeus_sync, cancel=True)
            zeus_call(zeus_mon.begin_window, key, sync_execution=zeus_sync)
            state["open"].add(key)
        return r

    def phase_end(name, pool=None):
        r = s_end(name, pool)
        key = "phase:%s" % name
        if zeus_mon is not None and key in state["open"]:
            state["open"].discard(key)
            m = zeus_call(zeus_mon.end_window, key, sync_execution=zeus_sync)
            if m is not None:
                p = state["zeus_phase"].setdefault(name, {"energy_j": 0.0, "time_s": 0.0, "n": 0})
                p["energy_j"] += m.gpu_energy.get(a.gpu, 0.0)
                p["time_s"] += m.time
                p["n"] += 1
        return r

    def update_end(*args, **kw):
        # the reference brackets eerl's update mark: one read right before the call, one right
        # after; eerl's own reading lies between them, so where the two agree the counter did
        # not step around it, and where they differ the summary knows by how much it may have
        refb = ref_now()
        t0 = time.monotonic()
        r = s_upd(*args, **kw)
        t1 = time.monotonic()
        ref1 = ref_now()
        t2 = time.monotonic()
        zu = None
        if zeus_mon is not None:
            m = zeus_call(zeus_mon.end_window, "update", sync_execution=zeus_sync)
            if m is not None:
                zu = {"energy_j": m.gpu_energy.get(a.gpu, 0.0), "time_s": m.time}
        t3 = time.monotonic()
        snap = prof.snapshot()
        cost = diff(state["snap"], snap)
        state["snap"] = snap
        rec = {"update": state["update"] + 1,  # numbered from 1, as eerl's trace does
               "step": trainer.state.global_step,
               "mono": [state["t_prev"], t0, t1, t2, t3],
               "ref_energy_mj": [ref1 - state["ref0"]] if ref1 is not None
               and state["ref0"] is not None else None,
               "ref_counter_mj": ref1,
               "ref_before_mj": refb,
               "zeus": None if zu is None else dict(zu, phases=state["zeus_phase"],
                                                    sync=zeus_sync, begin=state["zeus_begin"]),
               "cost": {k: [round(v[0], 7), round(v[1], 7), v[2]] for k, v in cost.items()},
               # eerl's own timing of its calls on this thread (eerl.Session: eerl/overhead_*)
               "eerl_overhead": None if r is None or "eerl/overhead_s" not in r
               else {"s": r["eerl/overhead_s"], "calls": r["eerl/overhead_calls"],
                     "pct": r["eerl/overhead_pct"]}}
        log_f.write(json.dumps(rec) + "\n")
        log_f.flush()
        state["update"] += 1
        start_update(ref1)
        return r

    session.phase_begin = phase_begin
    session.phase_end = phase_end
    session.update_end = update_end
    session.metrics = s_met

    # The hook's own Python: time the originals it wraps before it wraps them, then the hook's
    # wrappers after; each category's exclusive time leaves the other out.
    PC = profiling.ProfilingContext
    orig = (PC.__enter__, PC.__exit__, trainer._generate_and_score_completions)
    PC.__enter__ = prof.wrap("trl", orig[0])
    PC.__exit__ = prof.wrap("trl", orig[1])
    trainer._generate_and_score_completions = prof.wrap("trl", orig[2])
    cbs = list(trainer.callback_handler.callbacks)

    hook = eerl_trl.install(session, trainer)

    PC.__enter__ = prof.wrap("eerl_hook", PC.__enter__)
    PC.__exit__ = prof.wrap("eerl_hook", PC.__exit__)
    trainer._generate_and_score_completions = prof.wrap("eerl_hook",
                                                        trainer._generate_and_score_completions)
    for cb in trainer.callback_handler.callbacks:
        if cb in cbs:
            continue
        for ev in dir(TrainerCallback):
            if ev.startswith("on_") and callable(getattr(cb, ev, None)):
                setattr(cb, ev, prof.wrap("eerl_hook", getattr(cb, ev)))

    trl_log = open(os.path.join(a.out, "trl-log.jsonl"), "w")

    class Budget(TrainerCallback):
        """Ends training after the update that passes --seconds; keeps TRL's logs."""

        def on_train_begin(self, args, st, control, **kw):
            state["t_train0"] = time.monotonic()

        def on_step_end(self, args, st, control, **kw):
            now = time.monotonic()
            last = now - state.setdefault("t_step", state["t_train0"])
            state["t_step"] = now
            if a.seconds is not None and now - state["t_train0"] >= a.seconds:
                control.should_training_stop = True
            if a.stop_by is not None and now + 1.15 * last > a.stop_by:
                control.should_training_stop = True
            return control

        def on_log(self, args, st, control, logs=None, **kw):
            logs = logs or {}
            trl_log.write(json.dumps({"step": st.global_step, "mono": time.monotonic(),
                                      "logs": {k: v for k, v in logs.items()
                                               if isinstance(v, (int, float))}}) + "\n")
            trl_log.flush()
            g = logs.get("grad_norm")
            if isinstance(g, float) and g != g:
                state["nan_step"] = st.global_step
                say("step %d: the gradient norm is NaN (the weights are now NaN and the next "
                    "generation would fail); training stops here" % st.global_step)
                control.should_training_stop = True
            return control

    trainer.add_callback(Budget())

    class Lengths(TrainerCallback):
        """--lengths: each optimizer step's completion limit (TRL reads it from its generation
        config when it generates, at the step's first micro-batch); the first step's at HI."""

        def __init__(self):
            self.rng = random.Random(a.seed + 17)

        def on_step_begin(self, args, st, control, **kw):
            n = limits[0] if st.global_step == 0 else self.rng.choice(limits)
            trainer.generation_config.max_new_tokens = n
            trainer.max_completion_length = n
            state.setdefault("limits", []).append(n)
            return control

    if limits is not None:
        trainer.add_callback(Lengths())
    say("training: %d sequences per update (%d prompts x %d), micro-batch %d, completions up "
        "to %d tokens, beta %g; Zeus %s; reference %s"
        % (seqs, a.prompts, a.generations, a.micro_batch, a.max_completion, a.beta,
           ("on (sync_execution=%s)" % zeus_sync) if zeus_mon else "off",
           "on" if ref_read else "off"))
    t_train = time.monotonic()
    rusage0 = _rusage()
    trainer.train()
    t_train = time.monotonic() - t_train
    rusage1 = _rusage()
    # take our timers off the hook's wrappers, so that uninstall() finds its own and restores TRL
    PC.__enter__ = PC.__enter__.__wrapped__
    PC.__exit__ = PC.__exit__.__wrapped__
    trainer._generate_and_score_completions = trainer._generate_and_score_completions.__wrapped__
    hook.uninstall()
    PC.__enter__, PC.__exit__ = orig[0], orig[1]
    after = thread_cpu()
    t_close = time.monotonic()
    ecpu = {str(t): {"name": n, "cpu_s": after[t][1] - c0 if t in after else None,
                     "over_s": t_close - t_open}
            for t, (n, c0) in eerl_threads.items()}
    session.close()
    log_f.close()
    trl_log.close()
    tot = prof.snapshot()
    costs = {"train_s": t_train, "import_s": t_import, "updates": state["update"],
             "categories": {k: {"wall_s": v[0], "cpu_s": v[1], "calls": v[2]}
                            for k, v in tot.items()},
             "eerl_threads": ecpu, "process_cpu_s": rusage1 - rusage0,
             "zeus_errors": state["zeus_errors"], "unavailable": unavailable,
             "nan_step": state.get("nan_step")}
    with open(os.path.join(a.out, "costs.json"), "w") as f:
        json.dump(costs, f, indent=1)
    run = {"args": dict(vars(a), out=os.path.basename(os.path.normpath(a.out))), "dims": dims, "params": params, "vocab": vocab,
           "sequences_per_update": seqs, "target_length": target, "versions": versions,
           "gpu": gpu, "zeus_sync": zeus_sync, "completion_limits": state.get("limits")}
    with open(os.path.join(a.out, "run.json"), "w") as f:
        json.dump(run, f, indent=1)
    shutil.rmtree(scratch, ignore_errors=True)
    say("%d updates in %.1f s of training" % (state["update"], t_train))
    if state["update"] == 0:
        sys.exit("trl_grpo: no update was recorded")
    if state.get("nan_step"):
        sys.exit("trl_grpo: training stopped at step %d on a NaN gradient norm"
                 % state["nan_step"])


def _dist_version(name):
    try:
        import importlib.metadata
        return importlib.metadata.version(name)
    except Exception:  # noqa: BLE001
        return None


def _rusage():
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


if __name__ == "__main__":
    main()
