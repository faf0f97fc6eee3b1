"""Where a framework's job runs, as the GPUs eerl meters and clocks: what the one-line forms of
the integrations (eerl.integrations.trl.EerlCallback) use to find their pools by themselves.

  job_record(device, local_index)  this process's record: host, pid, rank and the GPU it uses
                                   (its CUDA device's UUID; on a machine without CUDA, the
                                   entry of CUDA_VISIBLE_DEVICES at its local index, if set)
  gather(obj) / broadcast(obj)     torch.distributed collectives on the default group, or the
                                   object itself in a single process
  node_gpus(eerld)                 this node's GPUs (NVML index, UUID, name) as eerl will see
                                   them: eerld's when the session goes through it, else NVML's
  is_twin(node)                    whether they are eerld --devices twin's simulated GPUs
  vllm_server(url)                 what a vLLM server says of itself (/server_info, which
                                   VLLM_SERVER_DEV_MODE=1 serves): its device, how many GPUs
                                   it runs on, its CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER
  server_gpus(srv, node)           which of node's GPUs those are, or why that cannot be told
  find(ids, node, what)            GPU ids (UUIDs, or NVML indices) -> NVML indices of node, or
                                   a ValueError naming the id that is not there

Owns nothing: each call opens and closes what it reads (an eerld connection, NVML). Touches no
clock and no session.
"""

import ctypes as C
import ipaddress
import json
import os
import socket
import threading
import urllib.parse

from .. import _lib

_fns = None


def _c():
    global _fns
    if _fns is None:
        d = _lib.declare
        P, I, U, S = C.c_void_p, C.c_int, C.c_uint, C.c_size_t
        _fns = {
            "wanted": d("eerl_agent_wanted", I, []),
            "open": d("eerl_device_open_nvml_ex", I, [C.c_char_p, S, C.POINTER(P)]),
            "free": d("eerl_device_free", None, [P]),
            "count": d("eerl_device_count", I, [P, C.POINTER(U)]),
            "uuid": d("eerl_device_uuid", I, [P, U, C.c_char_p, S]),
            "name": d("eerl_device_name", I, [P, U, C.c_char_p, S]),
        }
    return _fns


def norm_uuid(u):
    u = str(u).strip().lower()
    return u[4:] if u.startswith("gpu-") else u


def is_uuid(x):
    """A GPU named by UUID: NVIDIA's (GPU-..., MIG-...) or a twin eerld's simulated one
    (TWIN-..., what `eerld --devices twin` reports)."""
    return isinstance(x, str) and (x[:4].upper() in ("GPU-", "MIG-") or x.startswith("TWIN-"))


# ---- this process -------------------------------------------------------------------------------


def job_record(device, local_index):
    """This process's record (the shape eerl.multinode's adapters locate): {"node_id": None,
    "host", "pid", "rank", "local": local_index, "gpus": [the GPU it uses] or [], "why": how
    that was told}. Each node's launcher numbers its processes from local index 0, so the
    records with local 0 count the job's nodes.

    device: the torch.device the framework trains on (accelerate's accelerator.device). A CUDA
    device is named by its UUID, which CUDA itself gives whatever CUDA_DEVICE_ORDER is. A
    process on the CPU of a machine with CUDA uses no GPU. On a machine without CUDA, the entry
    of CUDA_VISIBLE_DEVICES at local_index, where that variable names GPUs (a stand-in node);
    else no GPU, "why" saying whether CUDA_VISIBLE_DEVICES is unset or set empty."""
    rec = {"node_id": None, "host": socket.gethostname(), "pid": os.getpid(), "rank": None,
           "local": int(local_index), "gpus": [], "why": ""}
    try:
        import torch
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            rec["rank"] = dist.get_rank()
        cuda = torch.cuda.is_available()
    except ImportError:
        torch, cuda = None, False
    kind = getattr(device, "type", str(device))
    if kind == "cuda" and cuda:
        k = device.index if device.index is not None else torch.cuda.current_device()
        rec["gpus"] = ["GPU-%s" % torch.cuda.get_device_properties(k).uuid]
        rec["why"] = "CUDA device %d" % k
        return rec
    if cuda:
        rec["why"] = "it trains on %s, not on a GPU" % kind
        return rec
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    env = [x.strip() for x in (raw or "").split(",") if x.strip()]
    if not env:
        rec["why"] = "%s, and %s" % (_no_cuda(torch), "CUDA_VISIBLE_DEVICES is not set"
                                     if raw is None else "CUDA_VISIBLE_DEVICES=%s hides every "
                                     "GPU" % json.dumps(raw))
        return rec
    if not 0 <= local_index < len(env):
        raise ValueError("eerl: process %s (local index %d) has no CUDA device and "
                         "CUDA_VISIBLE_DEVICES=%s names %d GPU(s): cannot tell its GPU"
                         % (rec["rank"], local_index, ",".join(env), len(env)))
    g = env[local_index]
    rec["gpus"] = [g if is_uuid(g) else int(g)]
    rec["why"] = "CUDA_VISIBLE_DEVICES entry %d (no CUDA here)" % local_index
    return rec


def _no_cuda(torch):
    """Why this process has no CUDA device, in words."""
    if torch is None:
        return "no CUDA device (torch is not installed)"
    if getattr(torch.version, "cuda", None) is None:
        return "no CUDA device (torch %s is a build without CUDA)" % torch.__version__
    return "no CUDA device (torch finds none)"


def is_twin(node):
    """Whether every GPU of node (node_gpus()) is simulated: eerld --devices twin, whose GPUs'
    UUIDs start with TWIN-. Any other GPU, a stand-in NVML's included, is taken as real."""
    return bool(node) and all(str(d["uuid"]).upper().startswith("TWIN-") for d in node)


def _dist():
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def gather(obj):
    """Collective: every process's obj, in rank order ([obj] in a single process)."""
    dist = _dist()
    if dist is None:
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast(obj):
    """Collective: global rank 0's obj, in every process."""
    dist = _dist()
    if dist is None:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def rank():
    dist = _dist()
    return dist.get_rank() if dist is not None else 0


# ---- this node --------------------------------------------------------------------------------


def uses_eerld(eerld):
    """Whether eerl.Session(eerld=eerld) goes through eerld, asked before it opens: the
    runtime's rule for a session given no device (include/eerl/runtime.h, eerl_rt_config.eerld),
    on eerl.Session's mapping of the keyword."""
    from .. import _types as T
    from ..session import _eerld_choice
    mode, _ = _eerld_choice(eerld)
    if mode == T.RT_EERLD_AUTO:
        return _lib.has("eerl_agent_wanted") and bool(_c()["wanted"]())
    return mode == T.RT_EERLD_ON


def node_gpus(eerld=None):
    """(this node's GPUs [{"gpu": NVML index, "uuid", "name"}], where from, in words)."""
    if uses_eerld(eerld):
        from ..agent import Agent
        a = Agent(socket=eerld if isinstance(eerld, str) else None, heartbeat=False)
        try:
            return a.devices(), "eerld at %s" % a.socket
        finally:
            a.close()
    f = _c()
    why = C.create_string_buffer(512)
    dev = C.c_void_p()
    _lib.check(f["open"](why, len(why), C.byref(dev)), "opening NVML", lambda: why.value)
    try:
        n = C.c_uint()
        _lib.check(f["count"](dev, C.byref(n)), "counting NVML's GPUs")
        out, buf = [], C.create_string_buffer(128)
        for g in range(n.value):
            _lib.check(f["uuid"](dev, g, buf, len(buf)), "UUID of GPU %d" % g)
            u = buf.value.decode()
            _lib.check(f["name"](dev, g, buf, len(buf)), "name of GPU %d" % g)
            out.append({"gpu": g, "uuid": u, "name": buf.value.decode()})
        return out, "NVML in this process"
    finally:
        f["free"](dev)


def describe(node, where):
    return "%s, which has %s" % (where, ", ".join(
        "%d (%s)" % (d["gpu"], d["uuid"]) for d in node) or "no GPU")


def find(ids, node, where, what):
    """NVML indices of ids (UUIDs, or NVML indices) on node (node_gpus()); ValueError naming
    the first one that is not there, what it is (what) and what node has."""
    by_uuid = {norm_uuid(d["uuid"]): d["gpu"] for d in node}
    out = []
    for g in ids:
        if is_uuid(g):
            idx = by_uuid.get(norm_uuid(g))
        else:
            try:
                idx = int(g)
            except (TypeError, ValueError):
                raise ValueError("eerl: %s: GPU %r is neither an NVML index nor a UUID "
                                 "('GPU-...')" % (what, g))
            idx = idx if any(d["gpu"] == idx for d in node) else None
        if idx is None:
            raise ValueError("eerl: %s: GPU %s is not one eerl can reach: %s"
                             % (what, g, describe(node, where)))
        out.append(idx)
    return out


# ---- a vLLM server ------------------------------------------------------------------------------


def _is_local(host):
    """Whether host (a URL's) is this machine: loopback, its name, or an address bound here."""
    if host in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    for fam, _, _, _, addr in infos:
        ip = ipaddress.ip_address(addr[0])
        if ip.is_loopback:
            return True
        s = socket.socket(fam, socket.SOCK_DGRAM)
        try:
            s.bind((addr[0], 0))  # succeeds only for an address of this machine
            return True
        except OSError:
            pass
        finally:
            s.close()
    return False


INFO_MAX_BYTES = 8 << 20  # /server_info with a model's whole configuration is well under this


def _get(url, timeout_s, cap):
    """(status, reason, body) of GET url, the whole answer within timeout_s in all (a server
    that trickles its bytes is cut at the deadline) and a body of at most cap bytes. OSError
    naming what went wrong."""
    import http.client
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("%s is not an http:// or https:// URL" % url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname, parts.port, timeout=timeout_s)
    late = threading.Event()

    def cut():  # the deadline: whatever read is under way returns
        late.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(timeout_s, cut)
    timer.daemon = True
    timer.start()
    try:
        path = parts.path + ("?" + parts.query if parts.query else "")
        conn.request("GET", path or "/")
        r = conn.getresponse()
        body = r.read(cap + 1)
        if late.is_set():
            raise OSError("it did not answer in full within %g s" % timeout_s)
        if len(body) > cap:
            raise OSError("its answer is over %d bytes" % cap)
        return r.status, r.reason, body
    except (OSError, http.client.HTTPException) as e:
        if late.is_set():
            raise OSError("it did not answer in full within %g s" % timeout_s)
        if isinstance(e, OSError):
            raise
        raise OSError("it does not answer as an HTTP server (%s: %s)" % (type(e).__name__, e))
    finally:
        timer.cancel()
        conn.close()


def vllm_server(base_url, timeout_s=30.0):
    """What the vLLM server at base_url says of itself (server_record() of its /server_info),
    the whole answer within timeout_s. Raises OSError (unreachable, too slow, too long, not
    HTTP) or ValueError (no /server_info: a server started without VLLM_SERVER_DEV_MODE=1; an
    answer not of /server_info's shape), naming the URL."""
    url = base_url.rstrip("/") + "/server_info?config_format=json"
    status, reason, body = _get(url, timeout_s, INFO_MAX_BYTES)
    if status != 200:
        raise ValueError("the vLLM server at %s answers %s %s to /server_info (it serves it "
                         "with VLLM_SERVER_DEV_MODE=1, as trl vllm-serve starts it)"
                         % (base_url, status, reason))
    try:
        info = json.loads(body.decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError("the answer of %s to /server_info is not JSON (%s)" % (base_url, e))
    return server_record(base_url, info)


def _field(obj, key, kind, where, default):
    """obj[key] when of type kind (absent or null: default); ValueError naming it otherwise."""
    v = obj.get(key)
    if v is None:
        return default
    if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
        raise ValueError("%s%s is %s, not %s" % (where, key, json.dumps(v)[:80], {
            dict: "an object", str: "a string", int: "an integer"}[kind]))
    return v


def server_record(base_url, info):
    """{"url", "local": on this machine, "device": "cuda", "cpu", ..., "count": GPUs it runs
    on (tensor x pipeline x local data parallel), "visible": its CUDA_VISIBLE_DEVICES entries or
    None, "order": its CUDA_DEVICE_ORDER or None} from a vLLM server's /server_info (info).
    ValueError naming the field when info is not of /server_info's shape."""
    try:
        if not isinstance(info, dict):
            raise ValueError("it is %s, not an object" % type(info).__name__)
        cfg = _field(info, "vllm_config", dict, "", {})
        par = _field(cfg, "parallel_config", dict, "vllm_config.", {})
        dev = _field(cfg, "device_config", dict, "vllm_config.", {})
        sys_env = _field(info, "system_env", dict, "", {})
        lines = _field(sys_env, "env_vars", str, "system_env.", "")
        sizes = []
        for key in ("world_size", "data_parallel_size_local"):
            n = _field(par, key, int, "vllm_config.parallel_config.", 1)
            if not 1 <= n <= 1 << 16:
                raise ValueError("vllm_config.parallel_config.%s is %d, not a count of GPUs"
                                 % (key, n))
            sizes.append(n)
        device = dev.get("device")
        if device is not None and not isinstance(device, str):
            raise ValueError("vllm_config.device_config.device is %s, not a string"
                             % json.dumps(device)[:80])
    except ValueError as e:
        raise ValueError("the answer of %s to /server_info is not of vLLM's shape: %s"
                         % (base_url, e))
    env = {}
    for line in lines.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            env[k.strip()] = v.strip()
    visible = env.get("CUDA_VISIBLE_DEVICES")
    return {"url": base_url, "local": _is_local(urllib.parse.urlsplit(base_url).hostname or ""),
            "device": str(device or "unknown"), "count": sizes[0] * sizes[1],
            "order": env.get("CUDA_DEVICE_ORDER"),
            "visible": None if visible is None else [x.strip() for x in visible.split(",")
                                                     if x.strip()]}


def server_gpus(srv, node):
    """(NVML indices of the vLLM server's GPUs on node, None) or (None, why they cannot be
    told). Its CUDA_VISIBLE_DEVICES entries in order (all of node's GPUs where it is unset), the
    first srv["count"] of them; UUIDs are found by UUID; CUDA ordinals are NVML indices only
    with CUDA_DEVICE_ORDER=PCI_BUS_ID or where the node's GPUs are all one model."""
    if srv["device"] != "cuda":
        return None, "the vLLM server at %s runs on device %r, not on a GPU" % (
            srv["url"], srv["device"])
    if not srv["local"]:
        return None, ("the vLLM server at %s runs on another machine, whose GPUs eerl does "
                      "not reach from here" % srv["url"])
    ids = srv["visible"] if srv["visible"] is not None else [str(d["gpu"]) for d in node]
    if len(ids) < srv["count"]:
        return None, ("the vLLM server at %s runs on %d GPUs but sees %d (CUDA_VISIBLE_DEVICES"
                      "=%s)" % (srv["url"], srv["count"], len(ids), ",".join(ids)))
    ids = ids[:srv["count"]]
    if any(not is_uuid(x) for x in ids):
        same = len({d["name"] for d in node}) <= 1
        if srv["order"] != "PCI_BUS_ID" and not same:
            return None, ("the vLLM server at %s names its GPUs by CUDA ordinal (%s) on a node "
                          "of several GPU models, without CUDA_DEVICE_ORDER=PCI_BUS_ID: their "
                          "NVML indices cannot be told" % (srv["url"], ",".join(ids)))
    by_uuid = {norm_uuid(d["uuid"]): d["gpu"] for d in node}
    out = []
    for x in ids:
        idx = by_uuid.get(norm_uuid(x)) if is_uuid(x) else (
            int(x) if x.isdigit() and any(d["gpu"] == int(x) for d in node) else None)
        if idx is None:
            return None, "the vLLM server at %s uses GPU %s, which is not on this node" % (
                srv["url"], x)
        out.append(idx)
    return out, None
