"""eerl.Session through an eerld that stops answering (SIGSTOP, as a hung or paused daemon):
no phase boundary blocks the training thread past the deadline, the session goes on with one
warning, takes its lease again once eerld answers, and its trace says which updates were not
judged (docs/trace-format.md, "Gap line")."""

import json
import os
import signal
import threading
import warnings

from eerld_nodes import start_nodes, wait_for
from test_session import one_update

import eerl

# A guard against hanging, never a speed check: without deadlines the first boundary blocked
# until eerld resumed, which here is only after the guard.
GUARD_S = 60


def run_guarded(fn):
    """fn() on a thread; fails if it is still running after GUARD_S."""
    box = {}

    def body():
        try:
            box["v"] = fn()
        except BaseException as e:  # handed to the test's thread
            box["e"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(GUARD_S)
    assert not t.is_alive(), "still blocked %d s after eerld stopped" % GUARD_S
    if "e" in box:
        raise box["e"]
    return box.get("v")


def test_a_stopped_eerld_is_a_gap_not_an_error(tmp_path):
    node = start_nodes(tmp_path / "nodes", 1, n_gpus=1)[0]
    trace = str(tmp_path / "run.jsonl")
    try:
        s = eerl.Session(mode="colocated", pools={"generation": [0], "training": [0]},
                         eerld=node.socket, trace=trace, install_sigterm=False)
        assert one_update(s, 1).accepted
        os.kill(node.proc.pid, signal.SIGSTOP)
        try:
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                done = run_guarded(lambda: [one_update(s, u) for u in (2, 3)])
        finally:
            os.kill(node.proc.pid, signal.SIGCONT)
        assert not done[-1].accepted  # measured in the gap: not judged
        said = [str(x.message) for x in w if "eerld" in str(x.message)]
        assert len(said) == 1, said
        assert "did not answer in" in said[0] and node.socket in said[0]
        # eerld answers again: a later boundary leases anew and the updates are judged again
        last = []

        def judged():
            last.append(one_update(s, 4 + len(last)))
            return last[-1].accepted
        wait_for(judged, 60, "an update judged after eerld resumed")
        s.close()  # the lease it holds now is released; nothing raises
    finally:
        node.stop()
    lines = [json.loads(x) for x in open(trace)]
    gaps = [x for x in lines if x["type"] == "gap"]
    updates = [x["update"] for x in lines if x["type"] == "update"]
    assert gaps and gaps[0]["update"] in (2, 3) and "did not answer" in gaps[0]["reason"]
    assert gaps[-1]["lease_back"] and not any(g["update"] in updates for g in gaps)
    assert updates[0] == 1 and updates[-1] == last[-1].update
    assert node.locks() == [(None, None)]  # closed: back at the governor
