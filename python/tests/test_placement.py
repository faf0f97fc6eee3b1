"""Where a job runs, as the one-line integrations find it (eerl/integrations/_placement.py):
a vLLM server's word on its GPUs (/server_info), however the server answers; the callback's
keywords, whatever the number of nodes."""

import json
import socket
import threading
import time

import pytest

from eerl.integrations import _placement as P
from eerl.integrations import _trl_callback as cb_mod

NODE = [{"gpu": g, "uuid": "GPU-0000000%d-0000-0000-0000-000000000000" % g, "name": "H100"}
        for g in range(4)]
RECS = [{"node_id": None, "host": "h", "pid": 7, "rank": 0, "local": 0, "gpus": [0],
         "why": "CUDA device 0"}]
STOP_S = 20.0  # every test server stops by itself after this long


class Server:
    """A loopback TCP server that answers every connection with answer(conn) and stops by
    itself after STOP_S seconds (or at stop())."""

    def __init__(self, answer):
        self.answer = answer
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.sock.settimeout(0.2)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.end = time.monotonic() + STOP_S
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while time.monotonic() < self.end:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(2.0)
                try:
                    conn.recv(65536)  # the request
                    self.answer(conn, self)
                except OSError:
                    pass
        self.sock.close()

    def stop(self):
        self.end = 0.0
        self.thread.join(timeout=STOP_S)


def http(body, status="200 OK"):
    body = body if isinstance(body, bytes) else json.dumps(body).encode()

    def answer(conn, _srv):
        conn.sendall(b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n" % (status.encode(), len(body)) + body)
    return answer


def trickle(conn, srv):
    # Headers, then one byte every 0.2 s of a long body, until the client goes or time is up.
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n{")
    while time.monotonic() < srv.end:
        time.sleep(0.2)
        conn.sendall(b" ")


def banner(conn, _srv):
    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")


def info(world_size=1, device="cuda", env_vars="CUDA_VISIBLE_DEVICES=2,3\n", **over):
    d = {"vllm_config": {"device_config": {"device": device},
                         "parallel_config": {"world_size": world_size,
                                             "data_parallel_size_local": 1}},
         "system_env": {"env_vars": env_vars}}
    d.update(over)
    return d


class Args:
    def __init__(self, url):
        self.vllm_server_base_url = url
        self.use_vllm, self.vllm_mode = True, "server"


class Trainer:
    def __init__(self, url):
        self.args = Args(url)


def find_pools(url):
    cb = cb_mod._Callback()
    cb.mode = "disaggregated"
    return cb._find_pools(Trainer(url), RECS, NODE, "eerld at test")


@pytest.fixture
def serve():
    started = []

    def start(answer):
        s = Server(answer)
        started.append(s)
        return s
    yield start
    for s in started:
        s.stop()


def test_a_good_answer_gives_the_servers_gpus(serve):
    s = serve(http(info()))
    pools, how = find_pools(s.url)
    assert pools == {"generation": [2], "training": [0]}
    assert "vLLM server" in how


REFUSED = "eerl: mode disaggregated needs the vLLM server's GPUs for the generation pool, and " \
          "the vLLM server at %s could not be asked: "
NAME_THEM = "Name them once: EerlCallback(vllm_server_gpus=[...])"


@pytest.mark.parametrize("answer, says", [
    (http([1, 2]), "is not of vLLM's shape: it is list, not an object"),
    (http("a string"), "is not of vLLM's shape: it is str, not an object"),
    (http(info(vllm_config=[1])), "vllm_config is [1], not an object"),
    (http(info(env_vars=["CUDA_VISIBLE_DEVICES=2"])), 'system_env.env_vars is ["CUDA_VISIBLE'),
    (http(info(world_size=-1)), "vllm_config.parallel_config.world_size is -1, not a count"),
    (http(info(world_size="2")), 'world_size is "2", not an integer'),
    (http(info(world_size=True)), "world_size is true, not an integer"),
    (http(b"{not json"), "to /server_info is not JSON"),
    (http(b"", status="404 Not Found"), "answers 404 Not Found to /server_info"),
    (banner, "it does not answer as an HTTP server (BadStatusLine"),
])
def test_an_answer_not_of_vllms_shape_is_the_documented_refusal(serve, answer, says):
    # Each used to escape as AttributeError or http.client.BadStatusLine (train() died), or,
    # for world_size -1, to give a generation pool of the wrong size.
    s = serve(answer)
    with pytest.raises(ValueError) as e:
        find_pools(s.url)
    text = str(e.value)
    assert text.startswith(REFUSED % s.url) and NAME_THEM in text, text
    assert says in text, text


def test_a_server_that_trickles_is_cut_at_one_deadline(serve):
    # Headers, then a byte every 0.2 s: each read comes in time, the whole never does. The
    # deadline is for the whole answer (the bug read on for as long as the server sent).
    s = serve(trickle)
    t0 = time.monotonic()
    with pytest.raises(OSError, match="did not answer in full within 2 s"):
        P.vllm_server(s.url, timeout_s=2.0)
    assert time.monotonic() - t0 < STOP_S / 2  # the server went on for STOP_S


def test_an_answer_over_the_cap_is_refused(serve, monkeypatch):
    monkeypatch.setattr(P, "INFO_MAX_BYTES", 1000)
    s = serve(http(info(padding="x" * 5000)))
    with pytest.raises(OSError, match="its answer is over 1000 bytes"):
        P.vllm_server(s.url)


# ---- a job that uses no GPU -----------------------------------------------------------------


def test_job_record_says_whether_cuda_visible_devices_is_unset_or_empty(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    r = P.job_record("cpu", 0)
    assert r["gpus"] == [] and 'CUDA_VISIBLE_DEVICES="" hides every GPU' in r["why"], r
    assert "not set" not in r["why"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    r = P.job_record("cpu", 0)
    assert r["gpus"] == [] and "CUDA_VISIBLE_DEVICES is not set" in r["why"], r


def test_twin_gpus_are_told_from_real_ones():
    assert P.is_twin([{"gpu": 0, "uuid": "TWIN-h100-idle-0000", "name": "twin h100 (idle)"}])
    assert not P.is_twin(NODE) and not P.is_twin([])
    assert not P.is_twin(NODE + [{"gpu": 4, "uuid": "TWIN-h100-idle-0000", "name": "t"}])


def test_verl_workers_without_a_gpu_are_refused_not_given_the_nodes():
    from eerl.integrations.verl import _job
    recs = [{"node_id": "n", "host": "h", "pid": 1, "rank": 0, "gpus": []}]
    with pytest.raises(ValueError, match="verl's training workers use no GPU .* eerl controls "
                                         "only GPUs the job uses, so it takes none"):
        _job.local_pools("colocated", recs, recs, {"eerld": "/nonexistent/eerld.sock"})


def test_multinode_workers_without_a_gpu_are_refused_saying_why():
    from eerl import multinode

    class OneNode(multinode._Adapter):
        nodes = [0]

        def call(self, cmd, per_node):  # "devices": what the node's eerld serves
            return {0: {"host": "h", "gpus": NODE}}

    rec = dict(RECS[0], gpus=[], why='CUDA_VISIBLE_DEVICES="" hides every GPU')
    with pytest.raises(ValueError, match='training: the workers given hold no GPU '
                                         r'\(CUDA_VISIBLE_DEVICES="" hides every GPU\): eerl '
                                         "controls only GPUs the job uses"):
        OneNode().locate({"training": [rec]})


# ---- the callback's keywords, whatever the number of nodes -----------------------------------


def test_callback_refuses_single_node_keywords_at_construction_on_many_nodes(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    for kw, why in (({"eerld": "/run/eerl/other.sock"}, "each node's eerld at its default"),
                    ({"eerld": False}, "each node's eerld"),
                    ({"meter_interval_ms": 100}, "reads every GPU at the phase boundaries")):
        with pytest.raises(TypeError) as e:
            cb_mod._Callback(**kw)
        text = str(e.value)
        assert text.startswith("eerl: %s=: the job (WORLD_SIZE 4, LOCAL_WORLD_SIZE 2) spans "
                               "several nodes" % list(kw)[0]) and why in text, text
    # What works across nodes is taken (MultiNodeSession takes each).
    cb_mod._Callback(prior="/some/dir", job_model="m", governor_peak_mhz=1980,
                     install_sigterm=False, eerld=None, meter_interval_ms=0, resume_tag="t")
    # On one node, all of eerl.Session's keywords.
    monkeypatch.setenv("WORLD_SIZE", "2")
    cb_mod._Callback(eerld="/run/eerl/other.sock", meter_interval_ms=100)


def test_callback_refuses_single_node_keywords_when_train_finds_many_nodes(monkeypatch):
    # A launcher that does not say (no WORLD_SIZE): refused when train() gathers the records,
    # in every process alike, before any lease.
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    cb = cb_mod._Callback(eerld="/run/eerl/other.sock")
    recs = [dict(RECS[0], local=0, rank=0), dict(RECS[0], local=0, rank=1)]

    class Acc:
        local_process_index = 0

    class T:
        accelerator = Acc()
    with pytest.raises(TypeError, match=r"eerld=: the job \(2 nodes\) spans several nodes"):
        cb._setup_nodes(T(), recs, None)
