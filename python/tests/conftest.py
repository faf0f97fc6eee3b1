"""Shared fixtures: which libeerl the tests load, and a stand-in NVML node per test.

libeerl: $EERL_LIBRARY (tools/run test sets it to build/libeerl.so), else <repo>/build/libeerl.so.
The stand-in NVML library (docs/device.md): $EERL_NVML_LIBRARY if set, else fake_nvml/ beside the
libeerl used. Every test gets its own state file (tmp_path), so tests never see each other's GPUs.
"""

import atexit
import json
import os
import secrets
import shutil
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.dirname(HERE)
REPO = os.path.dirname(PYROOT)
sys.path.insert(0, PYROOT)
sys.path.insert(0, os.path.join(HERE, "stubs"))

if not os.environ.get("EERL_LIBRARY"):
    os.environ["EERL_LIBRARY"] = os.path.join(REPO, "build", "libeerl.so")
LIB = os.path.abspath(os.environ["EERL_LIBRARY"])

# What a test waits for a child process (a CLI call, a training script, a torchrun job) before
# it calls it hung: a guard, never a speed check. Runs that take seconds on a quiet machine took
# minutes beside other builds and benchmarks on 2 cores, and a tighter bound failed them there.
HANG_S = 1200

# The Ray clusters of the tests: Ray's control service marks a node dead when it misses
# health_check_failure_threshold checks in a row (by default 5 of 10 s each, every 3 s). On a
# loaded 2-core machine a raylet once went unanswered that long and was marked dead (it then
# terminates itself), failing a test that had nothing to do with it. These bounds tolerate a
# starved raylet for minutes; the tests that lose a node on purpose detect it through eerl's own
# timeouts or the killed processes, not through this check.
RAY_SYSTEM_CONFIG = {"health_check_period_ms": 3000, "health_check_timeout_ms": 30000,
                     "health_check_failure_threshold": 10}
# Every Ray node the tests start listens and connects on loopback only.
RAY_NODE_IP = "127.0.0.1"


def _a_home_of_our_own():
    """Set before any test imports Ray, Hugging Face's libraries or PyTorch, inherited by every
    process the tests start (tests leave nothing outside their temporary folders): one fresh
    folder, removed when the test process exits, that holds
    - RAY_TMPDIR, with its "ray" inside: ray.cluster_utils.Cluster writes the cluster's address
      into Ray's *default* temp folder ($RAY_TMPDIR/ray, else /tmp/ray) whatever temp_dir the
      nodes get, and fails where that folder was never made, i.e. on a machine that never ran Ray;
    - RAY_AUTH_TOKEN_PATH, the token of the tests' Ray clusters: a new local cluster turns token
      authentication on and otherwise writes one to ~/.ray/auth_token;
    - HF_HOME (the datasets cache, ~/.cache/huggingface/datasets otherwise), XDG_CACHE_HOME (the
      caches of vLLM, pip and others, ~/.cache otherwise), MPLCONFIGDIR (matplotlib's font
      cache, and the settings folder it makes, ~/.config/matplotlib), and PyTorch's compile
      caches (/tmp/torchinductor_$USER otherwise);
    - TMPDIR, for the processes the tests start (this one keeps the system's, where pytest's own
      folders are): torchrun's log folders, and the folders of processes that are killed (Ray's
      workers, a training script that hangs) stay there otherwise.
    And RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, Ray's own single-machine setting (read when Ray is
    imported): without it Ray replaces 127.0.0.1 by the machine's outward address wherever it is
    given one (a node's address, the address ray.init connects to)."""
    if os.environ.get("EERL_TEST_RAY_OWNER"):
        return  # a process the tests started: it keeps its parent's
    tmp = tempfile.mkdtemp(prefix="eerl-ray-")  # and this process's temporary folder is fixed
    atexit.register(shutil.rmtree, tmp, True)
    os.makedirs(os.path.join(tmp, "ray"))
    token = os.path.join(tmp, "ray-auth-token")
    with open(os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(secrets.token_hex(32))
    os.environ.update({"RAY_TMPDIR": tmp, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                       "RAY_AUTH_TOKEN_PATH": token, "EERL_TEST_RAY_OWNER": str(os.getpid())})
    for var, sub in (("HF_HOME", "hf"), ("XDG_CACHE_HOME", "cache"),
                     ("MPLCONFIGDIR", "matplotlib"), ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
                     ("TRITON_CACHE_DIR", "triton"), ("TMPDIR", "tmp")):
        os.environ[var] = os.path.join(tmp, sub)
        os.makedirs(os.environ[var])


_a_home_of_our_own()
BUILD = os.path.dirname(LIB)
FAKE_NVML = os.environ.get("EERL_NVML_LIBRARY") or os.path.join(BUILD, "fake_nvml",
                                                                 "libnvidia-ml.so.1")
os.environ["EERL_NVML_LIBRARY"] = FAKE_NVML
EERL_BIN = os.environ.get("EERL_BIN") or os.path.join(BUILD, "eerl")
# The tests never talk to a real eerld unless they start one.
os.environ.pop("EERL_SOCKET", None)
# Nothing is downloaded: the tests build their models and tokenizers locally.
for _v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_v, "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def gpu(i, power_mw=300000):
    return {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-00000000-0000-0000-0000-%012d" % i,
        "memory_clocks_mhz": [2619, 1593],
        "sm_clocks_mhz": {"max": 1980, "min": 345, "step": 15},
        "sm_clock_mhz": 1980,
        "power_mw": power_mw,
        "locked_min_mhz": None,
        "locked_max_mhz": None,
        "throttle_reasons": 0,
        "energy_supported": True,
        "counter_stuck": False,
        "reset_counter": False,
        "lost": False,
    }


def write_state(path, n_gpus=2, lock_permitted=True, **extra):
    state = {"driver_version": "580.159.04", "nvml_version": "13.580.159.04",
             "virtual_time_ms": None, "energy_update_ms": 1, "lock_permitted": lock_permitted,
             "gpus": [gpu(i) for i in range(n_gpus)], "faults": []}
    state.update(extra)
    tmp = str(path) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, str(path))
    return str(path)


def read_locks(path):
    with open(path) as f:
        st = json.load(f)
    return [(g.get("locked_min_mhz"), g.get("locked_max_mhz")) for g in st["gpus"]]


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A 2-GPU stand-in node: returns the state file's path."""
    path = write_state(tmp_path / "nvml.json")
    monkeypatch.setenv("EERL_FAKE_NVML_STATE", path)
    return path


def child_env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = PYROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def have_runtime():
    try:
        from eerl import _lib
        return _lib.has("eerl_rt_new")
    except Exception:
        return False


needs_runtime = pytest.mark.skipif(not have_runtime(),
                                   reason="this libeerl has no runtime session (eerl_rt_new)")


class RecordingSession:
    """Stands in for eerl.Session in the integration tests: records the calls and enforces the
    runtime's rules (a phase begun twice, ended without a begin, or open at update end, and an
    update that ends before any phase began, are EERL_ESTATE), so a hook that breaks them fails
    here as it would against libeerl."""

    def __init__(self, mode="colocated"):
        self.mode = mode
        self.calls = []
        self.open = []
        self.updates = []

    def phase_begin(self, name, pool=None):
        from eerl import EerlError
        if name in self.open:
            raise EerlError(-15, "beginning phase %s" % name, "already in it")
        self.open.append(name)
        self.calls.append(("begin", name))

    def phase_end(self, name, pool=None):
        from eerl import EerlError
        if name not in self.open:
            raise EerlError(-15, "ending phase %s" % name, "not in it")
        self.open.remove(name)
        self.calls.append(("end", name))

    def update_end(self, generated_tokens, valid_tokens, longest_response, policy_version=None,
                   update=None):
        from eerl import EerlError
        if self.open:
            raise EerlError(-15, "ending update", "phase %s still open" % self.open)
        if not any(c[0] == "begin" for c in self.calls):
            raise EerlError(-15, "ending update", "update ends before any phase began")
        u = (float(generated_tokens), float(valid_tokens), float(longest_response),
             policy_version)
        self.updates.append(u)
        self.calls.append(("update",) + u)
        return self.metrics()

    def metrics(self):
        return {"eerl/state": "calibrating", "eerl/gen_mhz": 0, "eerl/train_mhz": 0,
                "eerl/observed": len(self.updates)}

    def phases(self):
        """The phases begun, in order, between update ends ('|')."""
        out = []
        for c in self.calls:
            if c[0] == "begin":
                out.append(c[1])
            elif c[0] == "update":
                out.append("|")
        return out
