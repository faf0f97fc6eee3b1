"""A node the driver gave up on is released, whatever it does later (issue 36, item 1): a slow
node, not a dead one, whose eerld answers only after the driver's wait. Its NodeServer applies
no clock change of the late command, and releases its GPUs; through Ray its actor is killed, so
its heartbeats no longer keep the lease. Each node's eerld is a real one over stand-in GPUs
(eerld_nodes.py); the Ray test runs a real Ray cluster as test_multinode_ray.py does. Every wait
is bounded by a generous guard; nothing here depends on how fast the machine is."""

import json
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import EERL_BIN, HANG_S
import eerld_nodes

from eerl import multinode

GOVERNOR = [(None, None)] * 2


def holders(node):
    """Who holds each GPU's lease, as the node's eerld says (`eerl status --json`)."""
    out = subprocess.run([EERL_BIN, "status", "--json", "--socket", node.socket],
                         capture_output=True, text=True, timeout=HANG_S)
    assert out.returncode == 0, out.stderr
    return [g["holder"] for g in json.loads(out.stdout)]


def held(proc):
    """SIGSTOP a node's eerld (a read held in it); returns the function that lets it go."""
    proc.send_signal(signal.SIGSTOP)
    return lambda: proc.send_signal(signal.SIGCONT)


@pytest.fixture
def node(tmp_path):
    n = eerld_nodes.start_nodes(tmp_path, 1)[0]
    try:
        yield n
    finally:
        n.proc.send_signal(signal.SIGCONT)
        n.stop()


def test_a_command_past_the_drivers_wait_is_not_applied_and_the_node_released(node):
    """The node side of both adapters (a torch.distributed node rank runs this NodeServer):
    eerld holds a boundary's read past the wait the driver gave it; when the read comes back the
    clock the boundary sets after it is not applied, the GPUs are released (eerld resets them
    and no one holds them) and the answer says the node gave up; a later command is refused."""
    srv = multinode.NodeServer(node.socket)
    assert srv.handle("lease", {"gpus": [0, 1]}, timeout_s=HANG_S)[0] == "ok"
    r = srv.handle("step", {"gpus": [0, 1], "before": [[[0, 1], 1200]]}, timeout_s=HANG_S)
    assert r[0] == "ok" and node.locks() == [(1200, 1200)] * 2, (r, node.locks())
    go_on = held(node.proc)
    out = []
    t = threading.Thread(target=lambda: out.append(srv.handle(
        "step", {"gpus": [0, 1], "after": [[[0, 1], 345]]}, timeout_s=0.2)))
    try:
        t.start()
        # eerld is held until the step's wait is over: its read cannot come back before
        eerld_nodes.wait_for(lambda: srv._deadline is not None or out, HANG_S,
                             "the step starting")
        assert not out, out  # it cannot answer while eerld is held
        end = srv._deadline[0]
        eerld_nodes.wait_for(lambda: time.monotonic() > end + 0.1, HANG_S, "the wait ending")
    finally:
        go_on()
    t.join(HANG_S)
    assert not t.is_alive(), "the held step never came back"
    assert out[0][0] == "err" and "gave up: 'step' ran past the driver's 0.2 s wait" in \
        out[0][2], out
    assert node.locks() == GOVERNOR  # 345 was never applied; 1200 was reset
    assert holders(node) == [None, None]
    r = srv.handle("step", {"gpus": [0, 1], "before": [[[0, 1], 900]]}, timeout_s=HANG_S)
    assert r[0] == "err" and "gave up" in r[2] and node.locks() == GOVERNOR, r
