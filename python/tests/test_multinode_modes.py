"""MultiNodeSession in every mode against eerl.Session on one node, given the same work, in
virtual time: the same observations and decisions, update by update.

A small cluster simulator drives both. Its GPUs are stand-in NVML GPUs (tests/fake_nvml) behind
real eerlds, in virtual time: at every event the simulator moves each state file's
"virtual_time_ms" on, and after the session's calls sets each GPU's power from what the GPU
does and the clock eerld locked it at (the stand-in integrates energy piecewise, exactly). A
phase's duration follows the clock its pool runs at when it begins, so the session's decisions
feed back into the work, as on a real cluster: a session that decided differently would see
other times and energies from then on.

The one-node session (eerl.Session through eerld, the C runtime, its meter sampled every 100
virtual ms between boundaries as its thread samples in real time) sees 4 GPUs of one node;
the multi-node session sees the same 4 GPUs as 2 GPUs on each of 2 nodes (each pool spread over
both nodes), through NodeServers in this process, each on its own node's eerld. Their trace
update lines must agree, figure by figure, but for the multi-node session's per-node records;
also when one GPU's counter resets or sticks mid-run (both sessions are the one C runtime, so
the meter's counter model and its flags apply to a remote node's GPU as to a local one).
"""

import heapq
import json
import math
import os

import pytest

from conftest import needs_runtime
import eerld_nodes

import eerl
from eerl import multinode

PEAK = 1980
SAMPLE_MS = 100  # eerl.Session's meter: a sample every 100 virtual ms between boundaries


def work(u):
    """G, N, L of update u: they vary, so the controller's predictor has something to fit."""
    return 40000 + 700 * (u % 7), 36000 + 500 * (u % 5), 3000 + 150 * (u % 3)


def base_ms(phase, u):
    G, N, L = work(u)
    return {"generation": G / 20.0 + L / 10.0, "logprob": N / 100.0, "training": N / 40.0,
            "refit": 150.0, "tail": 300.0}[phase]


def dur_ms(base, mhz):
    """Milliseconds of work at mhz: partly clock-bound, partly not."""
    return max(1, int(round(base * (0.35 + 0.65 * PEAK / mhz))))


def power_mw(mhz, busy):
    f = mhz / float(PEAK)
    return int(120000 + 480000 * f ** 2.2) if busy else int(60000 + 30000 * f)


class VirtualGPUs:
    """The stand-in GPUs of some eerld nodes as one list (global id -> (node, index)), in
    virtual time."""

    def __init__(self, nodes):
        from eerl.agent import Agent
        self.nodes = nodes
        self.where = [(n, i) for n in nodes for i in range(len(n.uuids))]
        self.t_ms = 0
        # the stand-in adopts a state file's new values when it is next called: one read
        # through each node's eerld makes it adopt each new power profile when it is written
        self.watch = [Agent(n.socket, name="sim") for n in nodes]

    def close(self):
        for a in self.watch:
            a.close()

    def _rewrite(self, fn):
        for n in self.nodes:
            st = json.load(open(n.state))
            fn(n, st)
            tmp = n.state + ".tmp"
            with open(tmp, "w") as f:
                json.dump(st, f)
            os.replace(tmp, n.state)

    def advance(self, t_ms):
        assert t_ms >= self.t_ms
        if t_ms == self.t_ms:
            return
        self.t_ms = t_ms

        def fn(n, st):
            st["virtual_time_ms"] = t_ms
        self._rewrite(fn)

    def clocks(self):
        out = []
        for n in self.nodes:
            st = json.load(open(n.state))
            out += [g.get("locked_max_mhz") or PEAK for g in st["gpus"]]
        return out

    def set_gpu(self, gid, **fields):
        """Changes one GPU's stand-in description (a counter fault), adopted at once."""
        node, i = self.where[gid]

        def fn(n, st):
            if n is node:
                st["gpus"][i].update(fields)
        self._rewrite(fn)
        self.watch[self.nodes.index(node)].read([0])

    def repower(self, busy):
        """busy: global ids of the GPUs at work; the others wait."""
        clk = self.clocks()
        per = {}
        for gid, (n, i) in enumerate(self.where):
            per[(n.k, i)] = power_mw(clk[gid], gid in busy)

        def fn(n, st):
            for i, g in enumerate(st["gpus"]):
                g["power_mw"] = per[(n.k, i)]
        self._rewrite(fn)
        for a in self.watch:
            a.read([0])


class Cluster:
    """Runs updates of one mode on a session over VirtualGPUs. pools: global ids per pool."""

    def __init__(self, vg, session, mode, pools):
        self.vg, self.s, self.mode = vg, session, mode
        self.pools = pools
        self.open = {"generation": set(), "training": set()}
        self.heap, self.seq = [], 0

    def busy(self):
        out = set()
        for key, phases in self.open.items():
            if phases:
                out |= set(self.pools[key])
        return out

    def clock_of(self, key):
        return self.vg.clocks()[self.pools[key][0]]

    def begin(self, phase, keys):
        self.s.phase_begin(phase)
        for k in keys:
            self.open[k].add(phase)
        self.vg.repower(self.busy())

    def end(self, phase, keys):
        self.s.phase_end(phase)
        for k in keys:
            self.open[k].discard(phase)
        self.vg.repower(self.busy())

    def later(self, t, fn):
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, fn))

    def run(self):
        sample = getattr(self.s, "sample", None)
        while self.heap:
            t, _, fn = heapq.heappop(self.heap)
            if sample is not None:  # eerl.Session's meter in virtual time: sampled as eerl sim does
                for t1 in range(self.vg.t_ms + SAMPLE_MS, t, SAMPLE_MS):
                    self.vg.advance(t1)
                    sample()
            self.vg.advance(t)
            fn(t)

    def update(self, u):
        sync = self.mode in ("colocated", "disaggregated")
        G, N, L = work(u)
        t0 = self.vg.t_ms
        both = ["generation"] if self.mode == "colocated" else ["generation", "training"]
        gen_keys = ["generation"]
        train_keys = ["generation"] if self.mode == "colocated" else ["training"]

        def phase(name, keys, base, then):
            def start(t):
                self.begin(name, keys)
                d = dur_ms(base, self.clock_of(keys[0]))
                self.later(t + d, lambda t2: (self.end(name, keys), then(t2)))
            return start

        def refit(t):
            self.begin("refit", both)
            d = max(dur_ms(base_ms("refit", u), self.clock_of(k)) for k in both)

            def done(t2):
                self.end("refit", both)
                if self.mode == "inflight":  # generation goes on after the refit, then ends
                    d2 = dur_ms(base_ms("tail", u), self.clock_of("generation"))
                    self.later(t2 + d2, lambda t3: self.end("generation", gen_keys))
            self.later(t + d, done)

        if sync:  # in turn: generation, log-prob, training, refit
            training = phase("training", train_keys, base_ms("training", u), refit)
            logprob = phase("logprob", train_keys, base_ms("logprob", u),
                            lambda t: training(t))
            self.later(t0, phase("generation", gen_keys, base_ms("generation", u),
                                 lambda t: logprob(t)))
        elif self.mode == "drained":  # generation beside training; both meet at the refit
            arrived = []

            def arrive(t):
                arrived.append(t)
                if len(arrived) == 2:
                    refit(t)
            training = phase("training", train_keys, base_ms("training", u), arrive)
            self.later(t0, phase("generation", gen_keys, base_ms("generation", u), arrive))
            self.later(t0, phase("logprob", train_keys, base_ms("logprob", u),
                                 lambda t: training(t)))
        else:  # in-flight: generation never drains; the refit pauses it
            self.later(t0, lambda t: self.begin("generation", gen_keys))
            training = phase("training", train_keys, base_ms("training", u), refit)
            self.later(t0, phase("logprob", train_keys, base_ms("logprob", u),
                                 lambda t: training(t)))
        self.run()
        assert not any(self.open.values()), self.open
        version = u if sync else max(0, u - 1 - (u % 3 == 0))
        return self.s.update_end(G, N, L, policy_version=version)


def updates_of(trace):
    """The update lines of a trace."""
    return [json.loads(x) for x in open(trace) if json.loads(x)["type"] == "update"]


def same(a, b, path=""):
    """Differences between two trace values (floats to 1e-9 relative: the sums run in another
    order), as a list of paths."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = ["%s/%s: only in one" % (path, k) for k in set(a) ^ set(b)]
        for k in set(a) & set(b):
            out += same(a[k], b[k], "%s/%s" % (path, k))
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return ["%s: %d against %d items" % (path, len(a), len(b))]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in same(x, y, "%s[%d]" % (path, i))]
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and \
                math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9):
            return []
    elif a == b:
        return []
    return ["%s: %r against %r" % (path, a, b)]


UPDATES = {"colocated": 40, "disaggregated": 40, "drained": 40, "inflight": 70}


def run_both(tmp_path, mode, updates, before_update=None):
    """The same work on eerl.Session over one node of 4 GPUs and on MultiNodeSession over 2
    nodes of 2 (each pool on both nodes); before_update(vg, u), if given, runs before update u
    on each. Returns the two traces' update lines."""
    state = {"virtual_time_ms": 0}
    one = eerld_nodes.start_nodes(tmp_path / "one", 1, n_gpus=4, state_fields=state)
    two = eerld_nodes.start_nodes(tmp_path / "two", 2, n_gpus=2, first=1, state_fields=state)
    try:
        if mode == "colocated":
            ids = {"generation": [0, 1, 2, 3], "training": [0, 1, 2, 3]}
        else:  # each pool on both nodes: GPU 0 of each node generates, GPU 1 trains
            ids = {"generation": [0, 2], "training": [1, 3]}
        results = {}
        for name, nodes in (("one", one), ("multi", two)):
            vg = VirtualGPUs(nodes)
            clock = (lambda vg: lambda: vg.t_ms / 1000.0)(vg)
            trace = str(tmp_path / ("%s.jsonl" % name))
            if name == "one":
                s = eerl.Session(mode=mode, pools=ids, eerld=nodes[0].socket, trace=trace,
                                 clock=clock, install_sigterm=False)
                ad = None
            else:
                ad = eerld_nodes.LocalAdapter([n.socket for n in nodes])
                pools = {k: {node: [g % 2 for g in v if g // 2 == node]
                             for node in (0, 1) if any(g // 2 == node for g in v)}
                         for k, v in ids.items()}
                s = multinode.MultiNodeSession(ad, mode=mode, pools=pools, trace=trace,
                                               clock=clock)
            try:
                vg.repower(set())
                c = Cluster(vg, s, mode, ids)
                for u in range(1, updates + 1):
                    if before_update is not None:
                        before_update(vg, u)
                    c.update(u)
            finally:
                s.close()
                vg.close()
                if ad is not None:
                    ad.close()
            for n in nodes:
                assert n.locks() == [(None, None)] * len(n.uuids), (name, n.locks())
            results[name] = updates_of(trace)
        return results["one"], results["multi"]
    finally:
        for n in one + two:
            n.stop()


def node_records(y):
    """The multi-node session's own records of an update line, taken out of it: each node's
    energy (checked to add up to the update's) and meter flags."""
    node_e = y["runtime"].pop("node_energy_j")
    assert math.isclose(sum(node_e.values()), y["energy_j"], rel_tol=1e-9)
    return node_e, y["runtime"].pop("node_meter_flags", None)


@needs_runtime
@pytest.mark.parametrize("mode", ["colocated", "disaggregated", "drained", "inflight"])
def test_multinode_matches_one_node_update_by_update(tmp_path, mode):
    a, b = run_both(tmp_path, mode, UPDATES[mode])
    assert len(a) == len(b) == UPDATES[mode]
    for x, y in zip(a, b):
        assert node_records(y)[1] == {}
        diff = same(x, y)
        assert not diff, "update %d differs: %s" % (x["update"], diff[:8])
    # and the run exercised what this mode has: decisions off the governor, and the
    # asynchronous modes' records
    moved = [x for x in a if x["setting"]["observed"] != {
        "gen_mhz": "governor", "train_mhz": "governor", "idle_mhz": "governor"}]
    assert moved, "the controller never left the governor in %d updates" % len(a)
    if mode != "colocated":
        assert all("arrival_s" in x["pools"]["training"] for x in a)
    if mode == "inflight":
        assert any(x.get("carryover") for x in a)
        assert {x["work"]["policy_age"] for x in a} >= {1, 2}


FAULT_AT = 6  # the update in which node 1's first GPU (GPU 2 of the one node) has its fault


def counter_fault(fault):
    """before_update for run_both: GPU 2's counter resets (the driver reset it) at the start of
    update FAULT_AT, or stops counting (stuck) for updates FAULT_AT and FAULT_AT + 1."""
    def before(vg, u):
        if fault == "reset" and u == FAULT_AT:
            vg.set_gpu(2, reset_counter=True)
        elif fault == "stuck" and u in (FAULT_AT, FAULT_AT + 2):
            vg.set_gpu(2, counter_stuck=u == FAULT_AT)
    return before


HW_THERMAL, SW_POWER_CAP = 0x40, 0x4


def slowdown_at(u_slow):
    """before_update for run_both: GPU 2 (node 1's first in the multi-node run) sits at its
    software power cap all run, and slows itself for heat during update u_slow only."""
    def before(vg, u):
        vg.set_gpu(2, power_limit_mw=700000,
                   throttle_reasons=SW_POWER_CAP | (HW_THERMAL if u == u_slow else 0))
    return before


@needs_runtime
def test_a_remote_gpus_own_slowdown_is_flagged_as_on_one_node(tmp_path):
    """The clock event reasons and the power limit travel from each node's eerld to the driver's
    meter: an update a node's GPU slowed by itself is flagged and not judged, and the share at
    the power cap is recorded, exactly as on one node."""
    a, b = run_both(tmp_path, "colocated", FAULT_AT + 2, slowdown_at(FAULT_AT))
    flagged = []
    for x, y in zip(a, b):
        node_records(y)
        diff = same(x, y)
        assert not diff, "update %d differs: %s" % (x["update"], diff[:8])
        slowed = "slowed" in y["runtime"]["meter_flags"].split(",")
        assert ("excluded" in y["runtime"]) == slowed, y["runtime"]
        assert "capped_share" in y["runtime"], y["runtime"]
        flagged += [y["update"]] * slowed
    # the reading that ends update FAULT_AT also opens the next one (no time between them)
    assert FAULT_AT in flagged and set(flagged) <= {FAULT_AT, FAULT_AT + 1}, flagged


@needs_runtime
@pytest.mark.parametrize("fault", ["reset", "stuck"])
@pytest.mark.parametrize("mode", ["colocated", "drained"])
def test_a_remote_counter_fault_is_handled_as_on_one_node(tmp_path, mode, fault):
    """A counter that resets, or sticks, on one node mid-run: the multi-node session flags it in
    the trace (the update's meter_flags, and that node's own) and counts that update's energy
    exactly as eerl.Session does on one node given the same counters: never a negative energy,
    never the stuck GPU as 0 J."""
    a, b = run_both(tmp_path, mode, FAULT_AT + 4, counter_fault(fault))
    assert len(a) == len(b) == FAULT_AT + 4
    for x, y in zip(a, b):
        node_e, node_f = node_records(y)
        diff = same(x, y)
        assert not diff, "update %d differs: %s" % (x["update"], diff[:8])
        assert x["energy_j"] > 0 and all(e > 0 for e in node_e.values()), (x, node_e)
        flags = x["runtime"]["meter_flags"]
        if x["update"] == FAULT_AT:
            assert fault in flags.split(","), flags
            assert set(node_f) == {"1"} and fault in node_f["1"].split(","), node_f
        elif fault not in flags.split(","):
            assert "0" not in (node_f or {}), node_f  # node 0 never had a fault
    # the fault's update is the other updates' size: the stuck GPU was counted from its power
    e = [x["energy_j"] / x["time_s"] for x in a]
    assert 0.5 < e[FAULT_AT - 1] / e[FAULT_AT - 2] < 2, e


# ---- bad input: refused at start, naming the node and the value -------------------------------


@pytest.fixture
def two_nodes(tmp_path):
    ns = eerld_nodes.start_nodes(tmp_path, 2)
    try:
        yield ns
    finally:
        for n in ns:
            n.stop()


def refused(adapter, mode, pools):
    with pytest.raises(ValueError) as e:
        multinode.MultiNodeSession(adapter, mode=mode, pools=pools)
    return str(e.value)


@pytest.mark.parametrize("mode", ["drained", "inflight"])
def test_a_pool_gpu_no_node_serves_is_refused(two_nodes, mode):
    ad = eerld_nodes.LocalAdapter([n.socket for n in two_nodes])
    try:
        msg = refused(ad, mode, {"generation": {0: [0, 1]}, "training": {1: [0, 5]}})
        assert "pools['training'] names GPU 5 of node 1, whose eerld serves GPUs 0-1" in msg, msg
        assert "no node serves that GPU" in msg, msg
    finally:
        ad.close()
    for n in two_nodes:  # nothing was leased
        assert n.locks() == [(None, None)] * 2


def test_nodes_of_another_gpu_model_are_refused(two_nodes, tmp_path):
    h200 = eerld_nodes.start_nodes(tmp_path / "h200", 1, first=5, name="NVIDIA H200")[0]
    try:
        ad = eerld_nodes.LocalAdapter([two_nodes[0].socket, h200.socket])
        try:
            msg = refused(ad, "drained", {"generation": {0: [0, 1]}, "training": {1: [0, 1]}})
            assert "GPU 0 of node 1 is a 'NVIDIA H200', but GPU 0 of node 0 is a " \
                "'NVIDIA H100 80GB HBM3': one session needs one GPU model" in msg, msg
        finally:
            ad.close()
        assert h200.locks() == [(None, None)] * 2
    finally:
        h200.stop()


@pytest.mark.parametrize("other", ["release", "protocol"])
def test_a_node_whose_eerld_is_of_another_version_is_refused(two_nodes, tmp_path, other):
    from eerl import _lib
    fake = eerld_nodes.OtherEerld(tmp_path, server="eerld 0.1.4",
                                  protocol=1 if other == "release" else 2)
    try:
        ad = eerld_nodes.LocalAdapter([two_nodes[0].socket, fake.socket])
        try:
            msg = refused(ad, "inflight", {"generation": {0: [0, 1]}, "training": {1: [0, 1]}})
            if other == "release":
                assert "node 1 runs 'eerld 0.1.4', which this eerl %s cannot drive" \
                    % _lib.library_version() in msg, msg
                assert "needs an eerld of release %s.x" % ".".join(
                    _lib.library_version().split(".")[:2]) in msg, msg
            else:
                assert "node 1: its eerld speaks another protocol version than this eerl" in msg \
                    and "this eerld speaks version 2" in msg, msg
        finally:
            ad.close()
        assert two_nodes[0].locks() == [(None, None)] * 2
    finally:
        fake.stop()
