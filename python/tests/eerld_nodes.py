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

    def __init__(self, root, k, n_gpus, **gpu_fields):
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
        self.state = write_state(os.path.join(self.dir, "nvml.json"), n_gpus=n_gpus, gpus=gpus)
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


def start_nodes(root, n_nodes, n_gpus=2, first=0, **gpu_fields):
    """n_nodes nodes of n_gpus stand-in GPUs each (gpu_fields: overrides of the stand-in's GPU
    description, e.g. sm_clocks_mhz)."""
    nodes = [Node(root, first + k, n_gpus, **gpu_fields) for k in range(n_nodes)]
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
