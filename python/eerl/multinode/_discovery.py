"""Where the framework's workers are: each worker's record (where_am_i, asked of Ray actors by
ray_worker_gpus, of placement-group bundles by ray_placement_group_gpus, of every rank by
torch_gather_gpus) names its node and its GPUs, by UUID where they can be known.

It runs in the workers and touches no eerld, adapter or session: an adapter's locate() maps
these records to each node's NVML indices.
"""

import os
import socket as _socket
import sys


def _is_uuid(x):
    return isinstance(x, str) and x[:4] in ("GPU-", "MIG-")


def _norm_uuid(u):
    return u[4:].lower() if u[:4] == "GPU-" else u.lower()


def _cuda_uuids(devices):
    """UUIDs of this process's CUDA devices (ordinals in its visible list; None: all), or None
    where PyTorch or a CUDA device is missing. CUDA itself says which physical GPU an ordinal
    is, whatever CUDA_DEVICE_ORDER is."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    n = torch.cuda.device_count()
    ks = list(range(n)) if devices is None else [int(k) for k in devices]
    bad = [k for k in ks if not 0 <= k < n]
    if bad:
        raise ValueError("eerl.multinode.local_gpus: device %d, but this process sees %d CUDA "
                         "device(s)" % (bad[0], n))
    return ["GPU-%s" % torch.cuda.get_device_properties(k).uuid for k in ks]


def _ray_gpu_ids():
    """A Ray worker's assigned GPU ids in the order its CUDA_VISIBLE_DEVICES lists them, or
    None outside a Ray worker."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    ctx = ray.get_runtime_context()
    if ctx.worker.mode != ray.WORKER_MODE:
        return None  # the driver holds no GPU of its own
    ids = [str(x) for x in ctx.get_accelerator_ids().get("GPU", [])]
    env = [x for x in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x]
    return env if sorted(env) == sorted(ids) else ids


def local_gpus(devices=None):
    """The GPUs this process uses, as the node's GPU ids: UUIDs ("GPU-...") where they can be
    known, else NVML indices. devices: positions in this process's visible device list (e.g.
    [local_rank] when every rank of a node sees all its GPUs); None: every GPU it holds.

    Where the answer comes from, first that applies: CUDA in this process (torch.cuda: the
    UUID of each device; in a Ray worker that sees more devices than Ray gave it, those Ray
    gave it); a Ray worker's assigned GPU ids; CUDA_VISIBLE_DEVICES. Integer ids are taken as
    NVML indices, which they are when the node's GPUs are one model or
    CUDA_DEVICE_ORDER=PCI_BUS_ID; put UUIDs in CUDA_VISIBLE_DEVICES to be independent of it."""
    ray_ids = _ray_gpu_ids()
    cuda_devices = devices
    if devices is None and ray_ids is not None:
        try:
            import torch
            many = torch.cuda.is_available() and torch.cuda.device_count() > len(ray_ids)
        except ImportError:
            many = False
        if many:  # RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES: Ray's ids are CUDA ordinals
            cuda_devices = [int(x) for x in ray_ids]
    got = _cuda_uuids(cuda_devices)
    if got is not None:
        return got
    ids = ray_ids
    if ids is None:
        env = os.environ.get("CUDA_VISIBLE_DEVICES")
        if env is None:
            raise RuntimeError("eerl.multinode.local_gpus: cannot tell which GPUs this process "
                               "uses: no CUDA device, not a Ray worker, and "
                               "CUDA_VISIBLE_DEVICES is not set")
        ids = [x.strip() for x in env.split(",") if x.strip()]
    if devices is not None:
        try:
            ids = [ids[int(k)] for k in devices]
        except IndexError:
            raise ValueError("eerl.multinode.local_gpus: devices %r, but this process sees %d "
                             "GPU(s): %s" % (list(devices), len(ids), ids))
    return [x if _is_uuid(x) else int(x) for x in ids]


def where_am_i(devices=None):
    """This worker's record for MultiNodeSession's pools: {"node_id": the Ray node id (None
    outside Ray), "host", "pid", "rank": the torch.distributed rank (None without a group),
    "gpus": local_gpus(devices)}."""
    rec = {"node_id": None, "host": _socket.gethostname(), "pid": os.getpid(), "rank": None,
           "gpus": local_gpus(devices)}
    if _ray_gpu_ids() is not None:
        rec["node_id"] = sys.modules["ray"].get_runtime_context().get_node_id()
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        rec["rank"] = dist.get_rank()
    return rec


def _where_actor(_self, devices=None):
    return where_am_i(devices)


def ray_worker_gpus(actors, timeout_s=120.0):
    """Asks each Ray actor (the framework's own workers: verl's worker group's .workers, a
    list of handles) where it runs and which GPUs it holds; returns their records."""
    import ray
    refs = [a.__ray_call__.remote(_where_actor) for a in actors]
    return ray.get(refs, timeout=timeout_s)


def _where_task():
    return where_am_i()


def ray_placement_group_gpus(pg, timeout_s=120.0):
    """Records for every bundle of a Ray placement group that holds GPUs, from a short task
    that takes all of the bundle's GPUs. Call it before the workers take the bundles (a bundle
    whose GPUs are in use cannot run the task; after that ask the workers: ray_worker_gpus).
    With one GPU per bundle the answer is the GPU every worker of that bundle gets."""
    import ray
    from ray.util.placement_group import placement_group_table
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    ray.get(pg.ready(), timeout=timeout_s)
    bundles = placement_group_table(pg)["bundles"]
    task = ray.remote(_where_task)
    refs = []
    for i in sorted(bundles):
        g = bundles[i].get("GPU", 0)
        if g <= 0:
            continue
        refs.append(task.options(num_cpus=0, num_gpus=g, scheduling_strategy=
                                 PlacementGroupSchedulingStrategy(
                                     pg, placement_group_bundle_index=i)).remote())
    return ray.get(refs, timeout=timeout_s)


def torch_gather_gpus(devices=None, group=None):
    """Collective: every rank of group calls it with the devices it uses; every rank gets all
    ranks' records (where_am_i), in rank order."""
    import torch.distributed as dist
    out = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, where_am_i(devices), group=group)
    return out


def _worker_name(rec):
    parts = []
    if rec.get("rank") is not None:
        parts.append("rank %s" % rec["rank"])
    parts.append("pid %s on %s" % (rec.get("pid"), rec.get("host")))
    if rec.get("node_id"):
        parts.append("Ray node %s" % rec["node_id"])
    return "worker " + ", ".join(parts)
