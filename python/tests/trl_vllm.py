"""Workers of test_trl_vllm.py, run with build-venv-vllm's python: TRL's three vLLM generation
paths with the real vLLM on the CPU (vllm_cpu.py: how, and the stand-ins for the steps that need
CUDA), each turned on by the one line, EerlCallback, with what TRL did recorded beside eerl.

    python trl_vllm.py colocate|server|async

reads TRL_TINY_MODEL (trl_tiny.build_model(path, vllm=True)), TRL_TINY_OUT (a folder: it
writes result.json there), TRL_VLLM_URL (server and async: a vLLM server of that model started
as `trl vllm-serve` starts it) and, in the environment, eerld's $EERL_SOCKET. Every scenario is
in a __main__ guard: vLLM's engine spawns processes that import this file."""

import json
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import trl_tiny  # noqa: E402
import vllm_cpu  # noqa: E402


def reward_chars(completions, **kwargs):
    """Characters of each completion (text, or AsyncGRPOTrainer's messages)."""
    return [float(len(c[-1]["content"] if isinstance(c, list) else c)) for c in completions]


def _train(t):
    """t.train(); the eerl warnings it gave (category, text)."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        t.train()
    return [(x.category.__name__, str(x.message)) for x in w if "eerl" in str(x.message)]


def _grpo(model, out, cb, **kw):
    t = trl_tiny.trainer(model, os.path.join(out, "run"), max_steps=2, use_vllm=True,
                         vllm_max_model_length=128, callbacks=[cb], **kw)
    return t, trl_tiny.Record(t)


def _seen(cb, t, rec, warned):
    return {"mode": cb.mode, "pools": cb.pools, "pools_from": cb.pools_from,
            "calls": trl_tiny.SPIES[-1].calls, "steps": rec.steps, "gens": rec.gens,
            "global_step": t.state.global_step, "warned": warned}


def colocate(model, out, url):
    import eerl
    from eerl.integrations.trl import EerlCallback
    trl_tiny.spy_on(eerl, "Session")
    cb = EerlCallback(trace=os.path.join(out, "eerl-run.jsonl"))
    t, rec = _grpo(model, out, cb, vllm_mode="colocate", vllm_gpu_memory_utilization=0.3,
                   vllm_enable_sleep_mode=False)
    vllm_cpu.colocate_reload(t)
    return _seen(cb, t, rec, _train(t))


def server(model, out, url):
    """The process's GPU is the stand-in node's GPU 0 (CUDA_VISIBLE_DEVICES, no CUDA here); the
    server runs on the CPU, so its GPUs cannot be found: refused, then named once."""
    import urllib.request

    import eerl
    from eerl.integrations.trl import EerlCallback
    trl_tiny.spy_on(eerl, "Session")
    reloads = vllm_cpu.weights_by_disk(out)
    kw = dict(vllm_mode="server", vllm_server_base_url=url)
    t, _ = _grpo(model, out, EerlCallback(trace=os.path.join(out, "refused.jsonl")), **kw)
    try:
        t.train()
        refused = None
    except ValueError as e:
        refused = str(e)
    refused_steps = t.state.global_step
    cb = EerlCallback(trace=os.path.join(out, "eerl-run.jsonl"),
                      vllm_server_gpus=[os.environ["TRL_VLLM_SERVER_GPU"]])
    t, rec = _grpo(model, out, cb, **kw)
    seen = _seen(cb, t, rec, _train(t))
    with urllib.request.urlopen(url + "/server_info?config_format=json") as r:
        info = json.loads(r.read().decode())
    return dict(seen, refused=refused, refused_steps=refused_steps, reloads=len(reloads),
                server_info=info)


def async_grpo(model, out, url):
    """AsyncGRPOTrainer against the server; TRL's own figures of each step recorded: the loss
    tokens of its micro-batches (compute_loss's global_n_tokens) and its logged staleness."""
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

    import eerl
    from eerl.integrations.trl import EerlCallback
    trl_tiny.spy_on(eerl, "Session")
    vllm_cpu.async_grpo_on_cpu()
    wt = vllm_cpu.disk_weight_transfer(url, out)
    cb = EerlCallback(trace=os.path.join(out, "eerl-run.jsonl"))
    args = AsyncGRPOConfig(output_dir=os.path.join(out, "run"), per_device_train_batch_size=4,
                           num_generations=2, max_completion_length=trl_tiny.MAX_COMPLETION,
                           max_steps=4, gradient_accumulation_steps=2, report_to=[],
                           logging_steps=1, save_strategy="no", use_cpu=True, seed=0,
                           vllm_server_base_url=url, disable_tqdm=True, max_staleness=4)
    prompts = [[{"role": "user", "content": p}] for p in trl_tiny.PROMPTS * 8]
    t = AsyncGRPOTrainer(model=model, reward_funcs=reward_chars, args=args,
                         train_dataset=Dataset.from_dict({"prompt": prompts}),
                         processing_class=AutoTokenizer.from_pretrained(model, padding_side="left"),
                         callbacks=[cb], weight_transfer=wt)
    steps = []
    orig = t.compute_loss

    def compute_loss(model, inputs, *a, **k):
        steps[-1]["N"] += float(inputs["global_n_tokens"][0])
        return orig(model, inputs, *a, **k)

    class Steps(TrainerCallback):
        def on_step_begin(self, *a, **k):
            steps.append({"N": 0.0, "version_at_begin": t.model_version})

    t.compute_loss = compute_loss
    t.add_callback(Steps())
    warned = _train(t)
    log = [{k: v for k, v in h.items() if k.startswith(("sample/", "batch/", "perf/weight"))
            or k == "step"} for h in t.state.log_history if "sample/staleness_max" in h]
    return {"mode": cb.mode, "pools": cb.pools, "pools_from": cb.pools_from, "warned": warned,
            "calls": trl_tiny.SPIES[-1].calls, "steps": steps, "log": log,
            "global_step": t.state.global_step, "reloads": wt.reloads,
            "model_version": t.model_version, "after": _async_after(t)}


class _Stub:
    """A session that takes every call (install()'s own hooking is checked, not eerl's)."""

    def __getattr__(self, name):
        return lambda *a, **k: None


def _async_after(t):
    """After train(): EerlCallback left nothing of its hook in the trainer; the explicit form
    hooks and unhooks the same points; a trainer without its weight-sync callback is refused."""
    from eerl.integrations import IntegrationError
    from eerl.integrations import trl as eerl_trl
    sync = [c for c in t.callback_handler.callbacks if type(c).__name__ == "StepIntervalCallback"
            and c.fn == t._sync_weight]

    def clean():
        return {"trainer": sorted(k for k in ("_sync_weight", "training_step") if k in vars(t)),
                "queue": "get" in vars(t.rollout_queue), "sync_fn_is_trl": all(
                    getattr(c.fn, "__func__", None) is type(t)._sync_weight for c in sync)}

    out = {"after_train": clean(), "sync_callbacks": len(sync)}
    hook = eerl_trl.install(_Stub(), t)
    out["installed"] = clean()
    hook.uninstall()
    out["uninstalled"] = clean()
    t.callback_handler.callbacks = [c for c in t.callback_handler.callbacks if c not in sync]
    try:
        eerl_trl.install(_Stub(), t)
    except IntegrationError as e:
        out["refused"] = str(e)
    return out


if __name__ == "__main__":
    what = {"colocate": colocate, "server": server, "async": async_grpo}[sys.argv[1]]
    o = os.environ["TRL_TINY_OUT"]
    res = what(os.environ["TRL_TINY_MODEL"], o, os.environ.get("TRL_VLLM_URL"))
    with open(os.path.join(o, "result.json"), "w") as f:
        json.dump(res, f)
