"""The NeMo-RL hook against eerl's NeMo-RL stand-in (python/tests/stubs/nemo_rl, README there),
as the newest release (v0.7.0: the Timer logs nothing, the hook wraps Timer.start/stop) and as
main (7ea279a: the Timer's DEBUG lines), in synchronous GRPO and async GRPO (drained, in-flight,
colocated), against a real eerl.Session on the stand-in NVML node: phases and token counts per
step, loud failures, refusals, uninstall."""

import io
import json
import logging
import re
import types
import warnings

import pytest

from conftest import RecordingSession, read_locks
import eerld_nodes

import eerl
from eerl import multinode
from eerl.integrations import nemo_rl as eerl_nemo
from eerl.integrations._common import IntegrationError
from nemo_rl import _standin
from nemo_rl.algorithms import grpo
from nemo_rl.utils import logger as nemo_logger
from nemo_rl.utils import timer as nemo_timer

# (generated length of each of the 4 responses, valid training tokens, avg trajectory age)
STEPS = [([10, 20, 30, 40], 95, 0.0), ([5, 5, 50, 20], 80, 1.0), ([8, 8, 8, 8], 32, 1.0)]
VERSION = {"v0.7.0": "0.7.0", "main": "0.6.0+7ea279a"}
SOURCE = {"v0.7.0": "methods", "main": "log"}


@pytest.fixture(params=["v0.7.0", "main"])
def rev(request):
    _standin.select(request.param)
    yield request.param
    _standin.select("main")


@pytest.fixture(autouse=True)
def clean_timer_logger():
    lg = logging.getLogger("nemo_rl.utils.timer")
    yield
    # every test's hook is uninstalled: nothing of eerl's is left on NeMo-RL
    assert lg.filters == [] and lg.handlers == [] and lg.level == logging.NOTSET
    assert "start" in nemo_timer.ReleaseTimer.__dict__
    assert not hasattr(nemo_timer.ReleaseTimer.start, "__wrapped__")
    assert not hasattr(nemo_logger.Logger.log_metrics, "__wrapped__")


def config(async_=False, colocated=True, in_flight=False, prompts=2, generations=2):
    return {"grpo": {"num_prompts_per_step": prompts, "num_generations_per_prompt": generations,
                     "async_grpo": {"enabled": async_, "in_flight_weight_updates": in_flight}},
            "policy": {"generation": {"colocated": {"enabled": colocated}}}}


class Tap:
    """A real eerl.Session with its phase and update calls recorded on the way through."""

    def __init__(self, session):
        self._s = session
        self.calls = []

    def __getattr__(self, name):
        return getattr(self._s, name)

    def phase_begin(self, name, pool=None):
        self.calls.append(("begin", name, pool))
        return self._s.phase_begin(name, pool)

    def phase_end(self, name, pool=None):
        self.calls.append(("end", name, pool))
        return self._s.phase_end(name, pool)

    def update_end(self, **kw):
        self.calls.append(("update",))
        return self._s.update_end(**kw)

    def steps(self):
        """Per update, the phases begun: (phase, pool) where a pool was named."""
        out, cur = [], []
        for c in self.calls:
            if c[0] == "begin":
                cur.append(c[1] if c[2] is None else (c[1], c[2]))
            elif c[0] == "update":
                out.append(cur)
                cur = []
        return out


def open_session(mode, trace, **kw):
    pools = {"generation": [0], "training": [0] if mode == "colocated" else [1]}
    return Tap(eerl.Session(mode=mode, pools=pools, trace=str(trace), **kw))


def trace_updates(path):
    return [json.loads(l) for l in open(str(path)) if '"type":"update"' in l.replace(" ", "")]


def work(u):
    w = u["work"]
    return (w["G"], w["N"], w["L"], w.get("policy_age"))


SYNC_STEP = ["refit", "generation", "logprob", "logprob", "training", "training"]


@pytest.mark.parametrize("mode", ["colocated", "disaggregated"])
def test_sync_grpo_phases_and_work(node, tmp_path, rev, mode):
    trace = tmp_path / "nemo.jsonl"
    s = open_session(mode, trace, observe_only=True)
    log = nemo_logger.Logger()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a clean run warns about nothing
        hook = eerl_nemo.install(s, config(colocated=mode == "colocated"), strict=True)
        assert hook.source == SOURCE[rev] and hook.version == VERSION[rev]
        try:
            grpo.grpo_train([st[:2] for st in STEPS], log, stage_s=0.002)
        finally:
            hook.uninstall()
            s.close()
    # every step refits first (the first one too: the weights start stale), then generates
    assert s.steps() == [SYNC_STEP] * 3
    ups = trace_updates(trace)
    # G = mean generated length x 4 samples, N = global_valid_toks, L = the longest; the
    # generation of each step ran on the weights of the step before (age 0)
    assert [work(u) for u in ups] == [(100.0, 95.0, 40.0, 0), (80.0, 80.0, 50.0, 0),
                                      (32.0, 32.0, 8.0, 0)]
    for u in ups:
        assert {"generation", "logprob", "training", "refit"} <= set(u["phases"])
        assert all(u["phases"][p]["time_s"] > 0 for p in ("generation", "logprob", "training"))
    logged = [m for p, _, m in log.logged if p == "train" and "eerl/observed" in m]
    assert [m["eerl/observed"] for m in logged] == [1, 2, 3]
    assert all(m["eerl/accepted"] == 1 and m["eerl/l_from_mean"] == 0 for m in logged)
    assert hook.complaints == 0


@pytest.mark.parametrize("mode", ["drained", "inflight"])
def test_async_grpo_phases_and_work(node, tmp_path, rev, mode):
    trace = tmp_path / "nemo.jsonl"
    s = open_session(mode, trace, observe_only=True)
    log = nemo_logger.Logger()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hook = eerl_nemo.install(s, config(async_=True, colocated=False,
                                           in_flight=mode == "inflight"), strict=True)
        try:
            # main: the buffer runs short once before step 2 (idle/buffer_starvation)
            grpo.async_grpo_train(STEPS, log, stage_s=0.002, starve_before=(1,))
        finally:
            hook.uninstall()
            s.close()
    gen, lp, tr = ("generation", "generation"), "logprob", "training"
    if mode == "drained":  # generation stops for the weight update (both pools refit)
        one = [lp, lp, tr, tr, "refit", gen]
    else:  # in-flight: generation runs on; the weight update is the training pool's
        one = [lp, lp, tr, tr, ("refit", "training")]
    assert s.steps() == [[gen] + one, [gen] + one, [gen] + one]
    ups = trace_updates(trace)
    # version = update - round(avg_trajectory_age): age 0, then 1
    assert [work(u) for u in ups] == [(100.0, 95.0, 40.0, 0), (80.0, 80.0, 50.0, 1),
                                      (32.0, 32.0, 8.0, 1)]
    assert [m["eerl/accepted"] for p, _, m in log.logged if "eerl/accepted" in m] == [1, 1, 1]
    assert s.calls[-1] == ("end", "generation", "generation")  # uninstall ended it


def test_colocated_async_grpo_on_main(node, tmp_path):
    cfg = config(async_=True, colocated=True)
    assert eerl_nemo.mode_for(cfg) == "colocated"  # a mode Session takes for shared GPUs
    trace = tmp_path / "nemo.jsonl"
    s = open_session("colocated", trace, observe_only=True)
    log = nemo_logger.Logger()
    hook = eerl_nemo.install(s, cfg, strict=True)
    try:
        grpo.async_grpo_train(STEPS, log, colocated=True, stage_s=0.002)
    finally:
        hook.uninstall()
        s.close()
    # the shared GPUs generate until the log-prob stage (the engine stands down), then log-prob,
    # train, refit in turn, and generate again from the end of the weight update; an update end
    # splits that generation
    one = ["generation", "logprob", "logprob", "training", "training", "refit", "generation"]
    assert s.steps() == [one, ["generation"] + one[1:], ["generation"] + one[1:]]
    assert [work(u) for u in trace_updates(trace)] == [
        (100.0, 95.0, 40.0, 0), (80.0, 80.0, 50.0, 1), (32.0, 32.0, 8.0, 1)]
    assert [m["eerl/accepted"] for p, _, m in log.logged if "eerl/accepted" in m] == [1, 1, 1]


def test_colocated_async_is_refused_by_the_release_itself():
    _standin.select("v0.7.0")
    try:
        with pytest.raises(AssertionError, match="Colocated inference is not supported"):
            grpo.async_grpo_train(STEPS, nemo_logger.Logger(), colocated=True)
    finally:
        _standin.select("main")


def test_dynamic_sampling_rounds_add_up(rev):
    s = RecordingSession()
    hook = eerl_nemo.install(s, samples_per_step=4, strict=True)
    try:  # the first step needed two generation rounds to fill its batch
        grpo.grpo_train([([[10, 10, 10, 10], [20, 30, 40, 50]], 70), ([8, 8, 8, 8], 32)],
                        nemo_logger.Logger(), stage_s=0.0)
    finally:
        hook.uninstall()
    assert s.phases() == ["refit", "generation", "refit", "generation", "logprob", "logprob",
                          "training", "training", "|"] + SYNC_STEP + ["|"]
    # policy versions in eerl's numbering, which counts updates from 1
    assert s.updates == [(40.0 + 140.0, 70.0, 50.0, 1), (32.0, 32.0, 8.0, 2)]


@pytest.mark.parametrize("max_key", ["gen_tokens_per_sample/max", None])
def test_longest_response_from_either_metric_or_the_mean_flagged(max_key):
    s = RecordingSession()
    log = nemo_logger.Logger()
    hook = eerl_nemo.install(s, samples_per_step=4, strict=True)
    try:
        if max_key is None:
            with pytest.warns(RuntimeWarning, match="L is the mean") as w:
                grpo.grpo_train([st[:2] for st in STEPS], log, stage_s=0.0, max_key=None)
            assert len(w) == 1
        else:
            grpo.grpo_train([st[:2] for st in STEPS], log, stage_s=0.0, max_key=max_key)
    finally:
        hook.uninstall()
    assert [u[2] for u in s.updates] == ([40.0, 50.0, 8.0] if max_key else [25.0, 20.0, 8.0])
    assert [m["eerl/l_from_mean"] for p, _, m in log.logged if "eerl/observed" in m] == \
        [0 if max_key else 1] * 3


class Renamed:
    """A NeMo-RL whose stage labels changed: every label the driver times gets a prefix."""

    @staticmethod
    def timer_class(base):
        class RenamedTimer(base):
            def start(self, label, *a):
                return super().start("stage/" + label, *a)

            def stop(self, label, *a):
                return super().stop("stage/" + label, *a)
        return RenamedTimer


def test_timer_output_matching_nothing_raises_when_strict(node, tmp_path, rev, monkeypatch):
    monkeypatch.setattr(grpo, "Timer", Renamed.timer_class(nemo_timer.Timer))
    trace = tmp_path / "nemo.jsonl"
    s = open_session("colocated", trace)
    hook = eerl_nemo.install(s, config(), strict=True)
    try:
        with pytest.raises(IntegrationError) as e:
            grpo.grpo_train([st[:2] for st in STEPS], nemo_logger.Logger(), stage_s=0.0)
    finally:
        hook.uninstall()
        s.close()
    msg = str(e.value)
    assert e.value.framework == "NeMo-RL" and e.value.version == VERSION[rev]
    assert "update 1 ended with no phase seen" in msg and "NeMo-RL %s" % VERSION[rev] in msg
    assert ("wrapping Timer.start/stop" if rev == "v0.7.0" else "DEBUG log lines") in msg
    assert "stage/generation" in msg  # the renamed labels it did see
    # the runtime takes no first update in which no phase began: the hook asked (one update, no
    # phase), none was recorded, the error says so, and the trace is kept
    assert s.steps() == [[]] and trace_updates(trace) == []
    assert "The update was not recorded" in msg
    assert json.loads(open(str(trace)).readline())["type"] == "header"


def test_timer_output_matching_nothing_warns_once(rev, monkeypatch):
    monkeypatch.setattr(grpo, "Timer", Renamed.timer_class(nemo_timer.Timer))
    s = RecordingSession()
    hook = eerl_nemo.install(s, samples_per_step=4)
    try:
        with pytest.warns(RuntimeWarning) as w:
            grpo.grpo_train([st[:2] for st in STEPS], nemo_logger.Logger(), stage_s=0.0)
    finally:
        hook.uninstall()
    ours = [str(x.message) for x in w if "eerl:" in str(x.message)]
    assert len(ours) == 1, ours
    assert "no phase seen" in ours[0] and "NeMo-RL %s" % VERSION[rev] in ours[0]
    assert hook.driver.blind_updates == 3  # every update counted; warned once
    assert hook.complaints == 0  # the renamed labels in the timing metrics map to nothing either
    assert s.updates == []  # nothing to observe: no update was ended in the session


def test_a_sync_hook_on_async_grpo_says_what_to_install(rev):
    s = RecordingSession(mode="disaggregated")
    hook = eerl_nemo.install(s, samples_per_step=4, strict=True)
    try:
        with pytest.raises(IntegrationError, match="no generation phase seen.*async GRPO's "
                                                   "labels.*install with the run's master_config"):
            grpo.async_grpo_train(STEPS, nemo_logger.Logger(), stage_s=0.0)
    finally:
        hook.uninstall()
    s = RecordingSession(mode="drained")
    hook = eerl_nemo.install(s, samples_per_step=4)
    try:  # not strict: the run goes on, and the warning says what to install
        with pytest.warns(RuntimeWarning, match="synchronous GRPO's label generation"):
            grpo.grpo_train([STEPS[0][:2]], nemo_logger.Logger(), stage_s=0.0)
    finally:
        hook.uninstall()
    assert len(s.updates) == 1


def test_losing_the_timer_mid_run_fails_loudly_restores_clocks_keeps_the_trace(node, tmp_path):
    """main: the Timer's log lines stop reaching the hook after the clocks were locked (here the
    logger is disabled); strict stops the run at that update's end; closing the session puts the
    clocks back to the governor and keeps the trace."""
    trace = tmp_path / "nemo.jsonl"
    s = open_session("colocated", trace)
    hook = eerl_nemo.install(s, config(), strict=True)
    lg = logging.getLogger("nemo_rl.utils.timer")
    log = nemo_logger.Logger()
    steps = [([10, 20, 30, 40], 95)] * 40
    try:
        for i in range(len(steps)):
            grpo.grpo_train(steps[i:i + 1], log, stage_s=0.003)
            if read_locks(node)[0][0] is not None:  # the session's GPU 0 is locked
                break
        assert read_locks(node)[0][0] is not None, read_locks(node)
        done = i + 1
        lg.disabled = True
        with pytest.raises(IntegrationError, match="update %d ended with no phase seen" % (i + 2)):
            grpo.grpo_train(steps[:1], log, stage_s=0.003)
    finally:
        lg.disabled = False
        hook.uninstall()
        s.close()
    assert read_locks(node) == [(None, None), (None, None)]
    ups = trace_updates(trace)
    assert len(ups) == done + 1  # every update so far, and the blind one, recorded before raising
    assert all(set(u["phases"]) == {"generation", "logprob", "training", "refit"}
               for u in ups[:-1])
    assert not any(v.get("time_s", 0) > 0 for k, v in ups[-1]["phases"].items()
                   if k != "other"), ups[-1]["phases"]


def test_timing_metrics_show_a_stage_the_hook_missed():
    """The step's "timing/train" metrics (what every revision logs) are checked against what the
    hook saw: a mapped stage that ran unseen is an error too."""
    s = RecordingSession()
    log = nemo_logger.Logger()
    hook = eerl_nemo.install(s, samples_per_step=4, strict=True)
    try:
        grpo.grpo_train([STEPS[0][:2]], log, stage_s=0.0)  # its own timing metrics: all seen
        with pytest.raises(IntegrationError, match="timing metrics of step 1 show .*weight_sync "
                                                   "ran, but the hook did not see weight_sync"):
            log.log_metrics({"policy_training": 0.1, "weight_sync": 0.2}, 1, prefix="timing/train")
    finally:
        hook.uninstall()
    assert hook.complaints == 1


def test_a_renamed_hook_point_is_refused_at_install(node, rev):
    s = eerl.Session(mode="colocated", pools={"generation": [0], "training": [0]})
    try:
        no_start = types.ModuleType("nemo_rl.utils.timer")
        no_start.Timer = type("Timer", (), {"begin": lambda self, label: None,
                                            "stop": lambda self, label: 0.0})
        with pytest.raises(IntegrationError, match=r"NeMo-RL %s has no nemo_rl.utils.timer."
                           r"Timer.start\(\): there is nothing" % re.escape(VERSION[rev])):
            eerl_nemo.install(s, config(), timer_module=no_start)
        no_log = types.ModuleType("nemo_rl.utils.logger")
        no_log.Logger = type("Logger", (), {"log": lambda self, m, step: None})
        with pytest.raises(IntegrationError, match=r"has no nemo_rl.utils.logger.Logger."
                                                   r"log_metrics\(\)"):
            eerl_nemo.install(s, config(), logger_module=no_log)
        if rev == "v0.7.0":  # the release's Timer has no log lines to read
            with pytest.raises(IntegrationError, match="has no DEBUG line.*no release does"):
                eerl_nemo.install(s, config(), timer_source="log")
            with pytest.raises(ValueError, match="context=.*has none"):
                eerl_nemo.install(s, config(), context={"worker": "driver"})
        assert s.status()["observed"] == 0
    finally:
        s.close()
    assert read_locks(node) == [(None, None), (None, None)]


def test_config_and_session_must_agree():
    s = RecordingSession(mode="colocated")
    with pytest.raises(ValueError, match="runs as eerl mode 'drained'.*session's mode is "
                                         "'colocated'"):
        eerl_nemo.install(s, config(async_=True, colocated=False))
    with pytest.raises(ValueError, match="samples_per_step is needed"):
        eerl_nemo.install(s)
    with pytest.raises(ValueError, match="samples_per_step must be positive"):
        eerl_nemo.install(s, samples_per_step=0)
    with pytest.raises(ValueError, match="'drained'.*not 'disaggregated'"):
        eerl_nemo.install(RecordingSession(mode="disaggregated"), samples_per_step=4,
                          async_grpo=True)
    with pytest.raises(ValueError, match="synchronous GRPO is mode"):
        eerl_nemo.install(RecordingSession(mode="inflight"), samples_per_step=4,
                          async_grpo=False)


def test_mode_for_reads_the_config():
    assert eerl_nemo.mode_for(config()) == "colocated"
    assert eerl_nemo.mode_for(config(colocated=False)) == "disaggregated"
    assert eerl_nemo.mode_for(config(async_=True, colocated=False)) == "drained"
    assert eerl_nemo.mode_for(config(async_=True, colocated=False, in_flight=True)) == "inflight"
    assert eerl_nemo.mode_for(config(async_=True, colocated=True)) == "colocated"
    attr = types.SimpleNamespace(  # main's MasterConfig: attributes, policy a dict
        grpo=types.SimpleNamespace(async_grpo=types.SimpleNamespace(
            enabled=True, in_flight_weight_updates=True)),
        policy={"generation": {"colocated": {"enabled": False}}})
    assert eerl_nemo.mode_for(attr) == "inflight"


def test_main_log_lines_context_and_quiet():
    _standin.select("main")
    s = RecordingSession()
    buf = io.StringIO()
    h = logging.StreamHandler(buf)
    root = logging.getLogger()
    root.addHandler(h)
    old = root.level
    root.setLevel(logging.DEBUG)
    hook = eerl_nemo.install(s, samples_per_step=4, context={"worker": "driver"})
    try:
        nemo_timer.Timer(context={"worker": "validator"}).start("generation")  # not the driver
        t = nemo_timer.Timer(context={"worker": "driver"})
        with t.time("generation"):
            pass
        t.record("policy_training", 0.5)  # a record line is no start or stop
        lg = logging.getLogger("nemo_rl.utils.timer")
        lg.debug("policy_training start")  # not the Timer's format
        lg.debug("[worker=driver hostname=h] policy_training start ts=2026-01-01T00:00:00.0Z")
        lg.debug("[worker=driver hostname=h] policy_training end elapsed=0.1000s ts=2026-01-01T0")
    finally:
        hook.uninstall()
        root.removeHandler(h)
        root.setLevel(old)
    assert s.calls == [("begin", "generation"), ("end", "generation"),
                       ("begin", "training"), ("end", "training")]
    assert "generation start" not in buf.getvalue()  # quiet: kept from the application's log
    s = RecordingSession()
    root.addHandler(h)
    root.setLevel(logging.DEBUG)
    hook = eerl_nemo.install(s, samples_per_step=4, quiet=False)
    try:
        grpo.grpo_train([STEPS[0][:2]], nemo_logger.Logger(), stage_s=0.0)
    finally:
        hook.uninstall()
        root.removeHandler(h)
        root.setLevel(old)
    assert "generation start" in buf.getvalue() and len(s.updates) == 1


def test_a_context_that_matches_no_timer_says_so():
    _standin.select("main")
    s = RecordingSession()
    hook = eerl_nemo.install(s, samples_per_step=4, strict=True, context={"worker": "trainer"})
    try:
        with pytest.raises(IntegrationError, match=r"no phase seen.*context=\{'worker': 'trainer'\}"
                                                   r" dropped all \d+ Timer events"):
            grpo.grpo_train([STEPS[0][:2]], nemo_logger.Logger(), stage_s=0.0)
    finally:
        hook.uninstall()


def test_thread_safe_timer_is_seen_through_either_source():
    _standin.select("main")
    for source in ("log", "methods"):
        s = RecordingSession()
        hook = eerl_nemo.install(s, samples_per_step=4, timer_source=source)
        try:
            t = nemo_timer.ThreadSafeTimer(context={"worker": "driver"})
            with t.time("policy_training"):
                pass
        finally:
            hook.uninstall()
        assert s.calls == [("begin", "training"), ("end", "training")], source


def test_uninstall_restores_nemo_rl(rev):
    orig_log = nemo_logger.Logger.log_metrics
    orig_start, orig_stop = nemo_timer.Timer.start, nemo_timer.Timer.stop
    hook = eerl_nemo.install(RecordingSession(), samples_per_step=4)
    assert nemo_logger.Logger.log_metrics is not orig_log
    assert (nemo_timer.Timer.start is not orig_start) == (rev == "v0.7.0")
    hook.uninstall()
    hook.uninstall()  # a second call does nothing
    assert nemo_logger.Logger.log_metrics is orig_log
    assert nemo_timer.Timer.start is orig_start and nemo_timer.Timer.stop is orig_stop


class TwoNodes(multinode._Adapter):
    """Two "nodes" in this process, one NodeServer per eerld, as RayAdapter's actors would run
    them on NeMo-RL's Ray cluster (the adapter's transport only; locate() is multinode's own)."""

    def __init__(self, nodes):
        self.servers = [multinode.NodeServer(n.socket) for n in nodes]
        self.nodes = list(range(len(nodes)))

    def call(self, cmd, per_node):
        ns = sorted(per_node)
        return self._unwrap(ns, [self.servers[n].handle(cmd, per_node[n]) for n in ns])

    def close(self):
        for s in self.servers:
            s.handle("close", None)


@pytest.fixture
def two_nodes(tmp_path):
    ns = eerld_nodes.start_nodes(tmp_path, 2)
    try:
        yield ns
    finally:
        for n in ns:
            n.stop()


def workers(node, host="stand-in"):
    """Worker records as multinode.ray_worker_gpus gives them: one worker per GPU, by UUID."""
    return [{"node_id": None, "host": host, "pid": 0, "rank": i, "gpus": [u]}
            for i, u in enumerate(node.uuids)]


@pytest.fixture
def revision(request):
    _standin.select(request.param)
    yield request.param
    _standin.select("main")


@pytest.mark.parametrize("revision,run", [
    ("v0.7.0", "sync colocated"), ("main", "sync colocated"), ("v0.7.0", "sync disaggregated"),
    ("main", "sync disaggregated"), ("main", "async colocated")], indirect=["revision"])
def test_grpo_across_two_nodes(two_nodes, tmp_path, revision, run):
    """The driver's hook over a MultiNodeSession: one controller, two eerld nodes. (v0.7.0 has no
    colocated async GRPO; async GRPO on separate generation GPUs, drained or in-flight, has no
    multi-node session.)"""
    mode = run.split()[1]
    ad = TwoNodes(two_nodes)
    a, b = workers(two_nodes[0]), workers(two_nodes[1])
    pools = ad.locate({"generation": a + b, "training": a + b} if mode == "colocated" else
                      {"generation": a, "training": b})
    trace = tmp_path / "nemo.jsonl"
    s = multinode.MultiNodeSession(ad, mode=mode, pools=pools, trace=str(trace))
    log = nemo_logger.Logger()
    async_ = run.startswith("async")
    hook = eerl_nemo.install(s, config(async_=async_, colocated=mode == "colocated"), strict=True)
    try:
        # stages of several ms: the energy check below compares counters read at boundaries
        # with the driver's time, so a scheduling hiccup on a loaded machine must stay small
        if async_:
            grpo.async_grpo_train(STEPS, log, colocated=True, stage_s=0.01)
        else:
            grpo.grpo_train([st[:2] for st in STEPS], log, stage_s=0.01)
    finally:
        hook.uninstall()
        s.close()
        ad.close()
    ups = trace_updates(trace)
    assert [(u["work"]["G"], u["work"]["N"], u["work"]["L"]) for u in ups] == [
        (100.0, 95.0, 40.0), (80.0, 80.0, 50.0), (32.0, 32.0, 8.0)]
    assert all({"generation", "logprob", "training", "refit"} <= set(u["phases"]) for u in ups)
    assert [m["eerl/observed"] for p, _, m in log.logged if "eerl/observed" in m] == [1, 2, 3]
    # the energy is the whole allocation's, both nodes' 4 GPUs at the stand-in's 300 W (one
    # node's counters alone would give half of that per GPU)
    per_gpu_w = sum(u["energy_j"] for u in ups) / sum(u["time_s"] for u in ups) / 4
    assert 200 < per_gpu_w < 450, per_gpu_w
