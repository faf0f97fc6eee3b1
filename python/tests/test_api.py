"""eerl.api: one typed interface for eerl.Session and MultiNodeSession (issue 37): both are
eerl.SessionLike, and an update, a setting and the status come back as dataclasses that still
read as the dicts they were."""

import json

import eerld_nodes
from conftest import needs_runtime
from test_session import one_update

import eerl
from eerl import multinode

pytestmark = needs_runtime


def check_typed(s):
    assert isinstance(s, eerl.SessionLike)
    u = one_update(s, 0)
    assert isinstance(u, eerl.Update) and u.update == 1 and u.energy_j > 0 and u.time_s > 0
    assert u.energy_per_valid_token_j == u.energy_j / u.valid_tokens and u.accepted
    assert u.meter_flags == 0 and u["eerl/update_energy_j"] == u.energy_j  # the metrics' keys
    assert "eerl/overhead_s" in u and "no such key" not in u  # as the dict it replaces
    assert u.metrics["eerl/update"] == 1
    st = s.status()
    assert isinstance(st, eerl.Status) and st.state == "calibrating" and st.observed == 1
    assert st["state"] == st.state and st.requested == {"gen_mhz": 0, "train_mhz": 0,
                                                         "idle_mhz": 0}
    a = s.applied_setting()
    assert isinstance(a, eerl.Setting) and a.governor and a.gen_mhz == 0 == a["train_mhz"]
    assert json.loads(json.dumps(st.to_dict()))["requested"]["idle_mhz"] == 0
    assert s.metrics()["eerl/state"] == "calibrating"  # the flat dict for loggers stays


def test_session_is_typed(node, tmp_path):
    with eerl.Session(pools={"generation": [0, 1], "training": [0, 1]},
                      install_sigterm=False) as s:
        check_typed(s)


def test_multinode_session_is_typed(tmp_path):
    nodes = eerld_nodes.start_nodes(tmp_path, 2)
    ad = eerld_nodes.LocalAdapter([n.socket for n in nodes])
    try:
        pools = {"generation": {0: [0, 1], 1: [0, 1]}, "training": {0: [0, 1], 1: [0, 1]}}
        with multinode.MultiNodeSession(ad, pools=pools) as s:
            check_typed(s)
            assert s.metrics()["eerl/nodes"] == 2
    finally:
        ad.close()
        for n in nodes:
            n.stop()
