"""python -m eerl doctor (the library's eerl_doctor_run) against an eerld that does not answer:
stopped (SIGSTOP), a listener that never answers, one that trickles a byte at a time. Each is an
error line saying eerld did not answer in the hello's deadline, and the doctor returns; before
the deadline it waited as long as the peer did (here: until the test's end)."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading

from conftest import child_env, write_state
from eerld_nodes import start_nodes

# A guard against hanging, never a speed check: the peers below never answer while it runs.
GUARD_S = 90


def doctor_json(tmp_path, sock):
    """The doctor's --json result; fails the test if it does not return within GUARD_S."""
    state = write_state(tmp_path / "nvml.json")
    r = subprocess.run([sys.executable, "-m", "eerl", "doctor", "--json", "--socket", sock],
                       env=child_env(EERL_FAKE_NVML_STATE=state), capture_output=True,
                       text=True, timeout=GUARD_S)
    assert r.returncode == 1, r.stdout + r.stderr
    return {c["check"]: c for c in json.loads(r.stdout)["checks"]}


def assert_did_not_answer(checks, sock):
    e = checks["eerld"]
    assert e["status"] == "error", e
    assert "eerld at %s did not answer in 5 s" % sock in e["message"], e
    assert "stopped, hung" in e["fix"], e


def test_a_stopped_eerld(tmp_path):
    node = start_nodes(tmp_path / "nodes", 1, n_gpus=1)[0]
    os.kill(node.proc.pid, signal.SIGSTOP)
    try:
        checks = doctor_json(tmp_path, node.socket)
    finally:
        os.kill(node.proc.pid, signal.SIGCONT)
        node.stop()
    assert_did_not_answer(checks, node.socket)


def listener(tmp_path):
    path = str(tmp_path / "silent.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(8)
    return srv, path


def test_a_listener_that_never_answers(tmp_path):
    srv, path = listener(tmp_path)
    try:
        checks = doctor_json(tmp_path, path)
    finally:
        srv.close()
    assert_did_not_answer(checks, path)


def test_a_listener_that_trickles_bytes(tmp_path):
    """A byte every 0.2 s, never a newline: a deadline per read would never end."""
    srv, path = listener(tmp_path)
    stop = threading.Event()

    def trickle():
        conns = []
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except OSError:
                pass
            for c in conns:
                try:
                    c.send(b" ")
                except OSError:
                    pass
        for c in conns:
            c.close()
    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    try:
        checks = doctor_json(tmp_path, path)
    finally:
        stop.set()
        t.join()
        srv.close()
    assert_did_not_answer(checks, path)
