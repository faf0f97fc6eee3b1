"""Stand-in nodes for the multi-node tests and bench: one eerld per "node", each over its own
stand-in NVML state (tests/fake_nvml: GPUs with UUIDs of their own, locks visible in the state
file) and listening on its own socket, as each machine of a cluster runs its own eerld.

Node k's GPU i has UUID GPU-0000000k-0000-0000-0000-00000000000i (k from 1), so a worker that
names a GPU by UUID names exactly one node's GPU.
"""

import os
import signal
import subprocess
import time

from conftest import BUILD, FAKE_NVML, gpu, read_locks, write_state

EERLD = os.path.join(BUILD, "eerld")


def uuid(node, g):
    return "GPU-%08d-0000-0000-0000-%012d" % (node + 1, g)


class Node:
    """One node's eerld: socket, state (the stand-in NVML state file), uuids, proc."""

    def __init__(self, root, k, n_gpus, state_fields=None, **gpu_fields):
        self.k = k
        self.dir = os.path.join(str(root), "node%d" % k)
        os.makedirs(self.dir, mode=0o700)
        os.chmod(self.dir, 0o700)
        self.socket = os.path.join(self.dir, "eerld.sock")
        self.uuids = [uuid(k, g) for g in range(n_gpus)]
        gpus = []
        for g in range(n_gpus):
            d = gpu(g)
            d["uuid"] = self.uuids[g]
            d.update(gpu_fields)
            gpus.append(d)
        self.state = write_state(os.path.join(self.dir, "nvml.json"), n_gpus=n_gpus, gpus=gpus,
                                 **(state_fields or {}))
        policy = os.path.join(self.dir, "policy.conf")
        with open(policy, "w") as f:
            f.write("")  # no rules: root (the tests) may lease
        env = dict(os.environ, EERL_FAKE_NVML_STATE=self.state, EERL_NVML_LIBRARY=FAKE_NVML)
        self.log = os.path.join(self.dir, "eerld.log")
        self.proc = subprocess.Popen(
            [EERLD, "--socket", self.socket, "--state-dir", os.path.join(self.dir, "state"),
             "--devices", "nvml", "--foreground", "--policy", policy],
            env=env, stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))

    def locks(self):
        return read_locks(self.state)

    def holders(self):
        """Who leases each GPU (eerld's status), None where nobody does."""
        return [g.get("holder") for g in eerld_status(self.socket)]

    def env(self):
        """What a node's processes see: its eerld at the default socket, its GPUs visible."""
        return {"EERL_SOCKET": self.socket, "CUDA_VISIBLE_DEVICES": ",".join(self.uuids)}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def eerld_status(sock_path):
    """eerld's status op (docs/eerld-protocol.md) of every GPU, over its wire protocol."""
    import json
    import socket as _sock
    with _sock.socket(_sock.AF_UNIX, _sock.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(sock_path)
        f = s.makefile("rwb")
        for req in ({"op": "hello", "v": 1, "client": "test-status"}, {"op": "status"}):
            f.write((json.dumps(req) + "\n").encode())
            f.flush()
            rep = json.loads(f.readline())
            assert rep["ok"], rep
        return rep["gpus"]


class TwinNode:
    """One eerld over n_gpus simulated GPUs (eerld --devices twin:h100xN, as a user tries eerl
    without GPUs): socket, uuids (TWIN-...), locks() and holders() from eerld's status."""

    def __init__(self, root, n_gpus=2):
        self.dir = os.path.join(str(root), "twin")
        os.makedirs(self.dir, mode=0o700)
        self.socket = os.path.join(self.dir, "eerld.sock")
        policy = os.path.join(self.dir, "policy.conf")
        with open(policy, "w") as f:
            f.write("")
        self.log = os.path.join(self.dir, "eerld.log")
        self.proc = subprocess.Popen(
            [EERLD, "--socket", self.socket, "--state-dir", os.path.join(self.dir, "state"),
             "--devices", "twin:h100x%d" % n_gpus, "--foreground", "--policy", policy],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        deadline = time.time() + 30
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise RuntimeError("twin eerld did not start: %s" % open(self.log).read())
            time.sleep(0.05)
        self.uuids = [g["uuid"] for g in eerld_status(self.socket)]

    def locks(self):
        return [tuple(g["locked"]) if g.get("locked") else (None, None)
                for g in eerld_status(self.socket)]

    def holders(self):
        return [g.get("holder") for g in eerld_status(self.socket)]

    def stop(self):
        Node.stop(self)


def start_nodes(root, n_nodes, n_gpus=2, first=0, state_fields=None, **gpu_fields):
    """n_nodes nodes of n_gpus stand-in GPUs each (gpu_fields: overrides of the stand-in's GPU
    description, e.g. sm_clocks_mhz; state_fields: of the state's top level, e.g.
    virtual_time_ms)."""
    nodes = [Node(root, first + k, n_gpus, state_fields, **gpu_fields) for k in range(n_nodes)]
    try:
        deadline = time.time() + 30
        while not all(os.path.exists(n.socket) for n in nodes):
            for n in nodes:
                if n.proc.poll() is not None:
                    raise RuntimeError("eerld of node %d exited %s: %s"
                                       % (n.k, n.proc.returncode, open(n.log).read()))
            if time.time() > deadline:
                raise RuntimeError("eerld sockets did not appear within 30 s")
            time.sleep(0.05)
    except BaseException:
        for n in nodes:
            n.stop()
        raise
    return nodes


def wait_for(cond, timeout, what):
    """Polls cond() until true; fails naming what after timeout seconds (generous: the machine
    is shared)."""
    deadline = time.time() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.time() > deadline:
            raise AssertionError("%s: not within %g s" % (what, timeout))
        time.sleep(0.1)


class LocalAdapter:
    """A multi-node adapter whose nodes are NodeServers in this process, each on its own eerld:
    for the checks that need several eerlds but no second process (the Ray and gloo adapters'
    own tests run them across processes)."""

    def __init__(self, sockets):
        from eerl import multinode
        self._base = multinode._Adapter()
        self.servers = [multinode.NodeServer(s) for s in sockets]
        self.nodes = list(range(len(sockets)))
        self.lost = set()

    def describe(self, node):
        return "node %d" % node

    def call(self, cmd, per_node):
        nodes = sorted(per_node)
        return self._base._unwrap(nodes, [self.servers[n].handle(cmd, per_node[n])
                                          for n in nodes])

    def close(self):
        for s in self.servers:  # as RayAdapter.close: a node that fails to release is closed
            s.handle("close", None)


class OtherEerld:
    """A stand-in for an eerld of another release, which cannot be installed here: it listens
    on its own socket and speaks eerld's wire protocol (docs/eerld-protocol.md) far enough for a
    client to meet it. server: the version its hello reports ("eerld 0.1.4"); protocol: the
    protocol version it speaks (another than 1: it refuses our hello with EERL_EVERSION, as
    eerld does). Serves n_gpus GPUs of the stand-in NVML's model and clocks."""

    def __init__(self, root, server="eerld 0.1.4", protocol=1, n_gpus=2):
        import json as _json
        import socket as _sock
        import threading
        self.dir = os.path.join(str(root), "other-eerld")
        os.makedirs(self.dir, exist_ok=True)
        self.socket = os.path.join(self.dir, "eerld.sock")
        self.srv = _sock.socket(_sock.AF_UNIX, _sock.SOCK_STREAM)
        self.srv.bind(self.socket)
        self.srv.listen(8)
        g = gpu(0)
        clocks = list(range(g["sm_clocks_mhz"]["max"], g["sm_clocks_mhz"]["min"] - 1,
                            -g["sm_clocks_mhz"]["step"]))
        devices = [{"gpu": i, "uuid": "GPU-000000ff-0000-0000-0000-%012d" % i, "name": g["name"],
                    "clocks": clocks, "floor_mhz": 0, "ceiling_mhz": 0} for i in range(n_gpus)]

        def serve(conn):
            f = conn.makefile("rwb")
            try:
                for line in f:
                    req = _json.loads(line)
                    rep = {"id": req.get("id", 0), "ok": True}
                    op = req.get("op")
                    if op == "hello" and protocol != 1:
                        rep.update(ok=False, error="EERL_EVERSION",
                                   message="protocol version %s is not served: this eerld "
                                           "speaks version %d" % (req.get("v"), protocol))
                    elif op == "hello":
                        rep.update(v=1, server=server, gpus=n_gpus, heartbeat_ms=5000, uid=0,
                                   pid=os.getpid(), may_lease=True)
                    elif op == "devices":
                        rep["gpus"] = devices
                    elif op != "heartbeat":
                        rep.update(ok=False, error="EERL_EPARSE", message="unknown op")
                    f.write((_json.dumps(rep) + "\n").encode())
                    f.flush()
                    if not rep["ok"] and op == "hello":
                        break
            except (OSError, ValueError):
                pass
            finally:
                conn.close()

        def accept():
            while True:
                try:
                    conn, _ = self.srv.accept()
                except OSError:
                    return
                threading.Thread(target=serve, args=(conn,), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()

    def stop(self):
        import socket as _sock
        try:
            self.srv.shutdown(_sock.SHUT_RDWR)
        except OSError:
            pass
        self.srv.close()
