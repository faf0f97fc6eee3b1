"""eerl.Session over the runtime on the stand-in NVML node: measuring, deciding, errors, and every
way a session ends restoring the clocks (close, garbage collection, SIGTERM)."""

import functools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import child_env, EERL_BIN, HANG_S, read_locks, write_state

import eerl
import eerl.tracefile  # read by a test below; nothing else here imports it

POOLS = {"generation": [0, 1], "training": [0, 1]}


def one_update(s, u, gen_s=0.012, train_s=0.008):
    with s.phase("generation"):
        time.sleep(gen_s)
    with s.phase("logprob"):
        time.sleep(0.002)
    with s.phase("training"):
        time.sleep(train_s)
    with s.phase("refit"):
        time.sleep(0.001)
    return s.update_end(generated_tokens=1000 + 7 * u, valid_tokens=900 + 5 * u,
                        longest_response=100 + u, policy_version=u)


def run_until_locked(s, state, limit=40):
    """Runs updates until the stand-in shows a locked clock on every GPU in a phase
    (calibration, then the search's first candidate is applied at the next phase begin: the
    default strategy, eerl's, probes one phase's clock at a time), and leaves the session in
    that phase, mid-update, as a crash would."""
    for u in range(limit):
        one_update(s, u)
        for phase in ("generation", "training"):
            s.phase_begin(phase)  # the next setting is applied at a phase begin
            if all(lo is not None for lo, _ in read_locks(state)):
                return u
            s.phase_end(phase)
    pytest.fail("no clock was locked after %d updates: %s" % (limit, read_locks(state)))


def test_measures_decides_and_traces(node, tmp_path):
    trace = str(tmp_path / "run.jsonl")
    t0 = time.monotonic()
    with eerl.Session(mode="colocated", pools=POOLS, trace=trace) as s:
        m = one_update(s, 0)
        t1 = time.monotonic()
        assert m["eerl/state"] == "calibrating"
        assert m["eerl/update"] == 1  # numbered from 1, as eerl sim and the CLI number them
        assert m["eerl/gen_mhz"] == 0 and m["eerl/train_mhz"] == 0  # governor while calibrating
        assert m["eerl/accepted"] == 1
        # two GPUs at 300 W: energy is real and of the right size, within bounds that hold
        # however slowly a loaded machine ran the update: the update spans at least its 23 ms of
        # sleeps, less a 1 ms counter step, and every read lies between t0 and t1 (twice that:
        # a mark the counter has not moved for integrates power from the last settled read)
        assert 2 * 300 * 0.022 < m["eerl/update_energy_j"] <= 2 * 300 * (2 * (t1 - t0) + 0.001)
        assert 0.023 <= m["eerl/update_time_s"] <= t1 - t0
        assert m["eerl/energy_per_valid_token_j"] == pytest.approx(m["eerl/update_energy_j"] / 900)
        one_update(s, 1)
        assert s.status()["observed"] == 2
    lines = [json.loads(l) for l in open(trace)]
    assert lines[0]["type"] == "header" and lines[0]["mode"] == "colocated"
    assert lines[0]["strategy"] == "eerl"  # the one default, as in the C API and eerl sim
    run = [l for l in lines if l.get("type") == "run"]
    assert run and run[0]["pools"] == POOLS
    assert [l["update"] for l in lines if l.get("type") == "update"] == [1, 2]


def test_the_session_times_its_own_calls_per_update(node):
    """eerl/overhead_s: the wall time the caller's thread spent in the session's calls, update
    by update (bounded by the wall time around them, which holds however loaded the machine)."""
    with eerl.Session(mode="colocated", pools=POOLS) as s:
        t0 = time.perf_counter()
        m = one_update(s, 0)  # 4 phases: 8 calls, and the update end
        t1 = time.perf_counter()
        assert m["eerl/overhead_calls"] == 9
        assert 0 < m["eerl/overhead_s"] <= t1 - t0 - 0.023  # the phases' sleeps are not eerl's
        assert m["eerl/overhead_pct"] == pytest.approx(
            100 * m["eerl/overhead_s"] / m["eerl/update_time_s"])
        s.metrics()  # a call between updates counts in the next one
        s.phase_begin("generation")
        time.sleep(0.01)
        s.phase_end("generation")
        m2 = s.update_end(generated_tokens=10, valid_tokens=10, longest_response=5)
        assert m2["eerl/overhead_calls"] == 4
        assert m2["eerl/overhead_s"] > 0
        assert s.metrics()["eerl/overhead_s"] == m2["eerl/overhead_s"]  # the last update's


def test_run_info_reaches_the_trace(node, tmp_path):
    trace = str(tmp_path / "run.jsonl")
    eerl.Session(pools=POOLS, trace=trace, run_info={"model": "unit-test", "seed": 3}).close()
    run = [json.loads(l) for l in open(trace) if '"run"' in l][0]
    assert run["model"] == "unit-test" and run["seed"] == 3
    with pytest.raises(ValueError, match="run_info must be a dict"):
        eerl.Session(pools=POOLS, run_info=["not", "a", "dict"])


def test_a_trace_is_never_lost_and_links_are_never_followed(node, tmp_path):
    """issue 53 items 1 and 3: a fresh session refuses a trace that holds lines (naming it and
    what to do), a second live session on the same trace is refused, a resumed one appends a
    segment; a link planted at the trace path or beside a saved state is never written through,
    and a directory every user can write is refused naming it."""
    trace = str(tmp_path / "eerl-run.jsonl")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    with eerl.Session(pools=POOLS, trace=trace, resume_from=str(ckpt)) as s:
        one_update(s, 1)
        with pytest.raises(eerl.EerlError) as e:
            eerl.Session(pools=POOLS, trace=trace, resume_from=str(ckpt), observe_only=True)
        assert e.value.name == "EERL_EBUSY" and trace in str(e.value)
        s.save_state(str(ckpt))
    before = open(trace).read()
    with pytest.raises(eerl.EerlError) as e:
        eerl.Session(pools=POOLS, trace=trace)
    assert e.value.name == "EERL_EEXIST" and trace in str(e.value)
    assert "resume_from" in str(e.value) and open(trace).read() == before
    with eerl.Session(pools=POOLS, trace=trace, resume_from=str(ckpt)) as s:
        one_update(s, 2)
    t = eerl.tracefile.read(trace)
    assert len(t.segments) == 2 and t.segments[1]["header"].get("appended") is True
    assert len(t.updates) == 2 and open(trace).read().startswith(before)
    victim = tmp_path / "victim"
    victim.write_text("the user's file\n")
    planted = tmp_path / "planted.jsonl"
    planted.symlink_to(victim)
    with pytest.raises(eerl.EerlError) as e:
        eerl.Session(pools=POOLS, trace=str(planted))
    assert e.value.name == "EERL_EUNSAFE" and "symbolic link" in str(e.value)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "job.state.tmp").symlink_to(victim)
    with eerl.Session(pools=POOLS) as s:
        s.save_state(str(shared / "job.state"))
        assert not os.path.islink(shared / "job.state")
        os.chmod(shared, 0o777)
        with pytest.raises(eerl.EerlError) as e:
            s.save_state(str(shared / "job2.state"))
        assert e.value.name == "EERL_EUNSAFE" and str(shared) in str(e.value)
        assert "chmod" in str(e.value)
    assert victim.read_text() == "the user's file\n"


def test_bad_arguments_are_refused_with_the_value(node, tmp_path):
    with pytest.raises(ValueError, match="mode 'sync'"):
        eerl.Session(mode="sync", pools=POOLS)
    with pytest.raises(ValueError, match="unknown key"):
        eerl.Session(pools={"gen": [0]})
    with pytest.raises(ValueError, match="colocated"):
        eerl.Session(mode="colocated", pools={"generation": [0], "training": [1]})
    with pytest.raises(ValueError, match="negative"):
        eerl.Session(pools={"generation": [-1], "training": [-1]})
    with pytest.raises(eerl.EerlError) as e:
        eerl.Session(pools=POOLS, allowed_loss=0.7)
    assert e.value.name == "EERL_EINVAL" and "0.7" in str(e.value)
    missing = str(tmp_path / "no" / "such" / "dir" / "run.jsonl")
    with pytest.raises(eerl.EerlError) as e:
        eerl.Session(pools=POOLS, trace=missing)
    assert missing in str(e.value)
    assert not os.path.exists(missing)
    with pytest.raises(eerl.EerlError) as e:
        eerl.Session(pools={"generation": [0, 5], "training": [0, 5]})
    assert "5" in str(e.value)
    assert eerl.live_sessions() == []


def test_no_driver_is_a_clear_error(node, monkeypatch, tmp_path):
    monkeypatch.setenv("EERL_NVML_LIBRARY", str(tmp_path / "libnvidia-ml.so.1"))
    with pytest.raises(eerl.EerlError) as e:
        eerl.Session(pools=POOLS)
    assert e.value.name == "EERL_ENODRIVER" and "libnvidia-ml.so.1" in str(e.value)


def test_misuse_of_phases_and_closed_sessions(node):
    s = eerl.Session(pools=POOLS)
    with pytest.raises(ValueError, match="unknown phase 'rollout'"):
        s.phase_begin("rollout")
    with pytest.raises(eerl.EerlError) as e:
        s.phase_end("training")
    assert e.value.name == "EERL_ESTATE"
    s.phase_begin("generation")
    with pytest.raises(eerl.EerlError) as e:
        s.update_end(generated_tokens=10, valid_tokens=10, longest_response=5)
    assert e.value.name == "EERL_ESTATE"
    s.phase_end("generation")
    with pytest.raises(ValueError, match="valid_tokens"):
        s.update_end(generated_tokens=10, valid_tokens="many", longest_response=5)
    # the body's exception wins over eerl's, and the phase is ended
    with pytest.raises(KeyError):
        with s.phase("training"):
            raise KeyError("framework error")
    s.phase_begin("training")
    s.phase_end("training")
    s.close()
    s.close()  # idempotent
    assert s.closed
    with pytest.raises(eerl.EerlError) as e:
        s.phase_begin("generation")
    assert e.value.name == "EERL_ESTATE"


def test_close_restores_clocks(node):
    s = eerl.Session(pools=POOLS)
    run_until_locked(s, node)
    s.close()
    assert read_locks(node) == [(None, None), (None, None)]


def test_garbage_collection_restores_clocks_and_leaks_nothing(node):
    # Counted in a child process that loads eerl alone: in the test process the threads and
    # descriptors of the frameworks other tests loaded (Ray, torch, gRPC) start and end on their
    # own time, and a count taken there once read two threads more that were never eerl's.
    script = textwrap.dedent("""
        import gc, os, sys
        sys.path.insert(0, %r)
        import eerl
        from test_session import run_until_locked, POOLS
        from conftest import read_locks

        def fds():
            return len(os.listdir("/proc/self/fd"))

        def threads():
            return len(os.listdir("/proc/self/task"))

        s = eerl.Session(pools=POOLS)  # warm up: the library and NVML are loaded once
        s.close()
        base_fds, base_threads = fds(), threads()
        s = eerl.Session(pools=POOLS)
        run_until_locked(s, %r)
        assert threads() > base_threads, "the session's sampler thread was expected to run"
        assert eerl.live_sessions() == [s]
        del s
        gc.collect()
        assert read_locks(%r) == [(None, None), (None, None)], read_locks(%r)
        assert eerl.live_sessions() == []
        for _ in range(10):  # dropped without close
            eerl.Session(pools=POOLS)
        gc.collect()
        assert eerl.live_sessions() == []
        print("FDS", base_fds, fds(), "THREADS", base_threads, threads(), flush=True)
    """ % (os.path.dirname(os.path.abspath(__file__)), node, node, node))
    p = subprocess.run([sys.executable, "-c", script], env=child_env(), capture_output=True,
                       text=True, timeout=HANG_S)
    assert p.returncode == 0, p.stderr
    counts = p.stdout.split()
    assert counts[0] == "FDS" and counts[3] == "THREADS", p.stdout
    assert counts[2] == counts[1], "descriptors before and after: %s" % p.stdout
    assert counts[5] == counts[4], "threads before and after: %s" % p.stdout


def test_observe_only_never_locks(node):
    s = eerl.Session(pools=POOLS, observe_only=True)
    for u in range(20):
        one_update(s, u)
        assert read_locks(node) == [(None, None), (None, None)]
    assert s.applied_setting() == {"gen_mhz": 0, "train_mhz": 0, "idle_mhz": 0}
    s.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT],
                         ids=["SIGTERM", "SIGHUP", "SIGQUIT"])
def test_a_supervisors_signal_restores_clocks_then_kills(node, tmp_path, sig):
    """SIGTERM (Slurm, Kubernetes, systemd), SIGHUP and SIGQUIT (which torchrun forwards too) to
    a program without a handler of its own: the clocks are restored, the trace is whole, and the
    process still dies of that signal."""
    trace = str(tmp_path / "run.jsonl")
    script = textwrap.dedent("""
        import sys, time
        sys.path.insert(0, %r)
        import eerl
        from test_session import run_until_locked, POOLS
        s = eerl.Session(pools=POOLS, trace=%r)
        run_until_locked(s, %r)
        print("LOCKED", flush=True)
        time.sleep(60)
    """ % (os.path.dirname(os.path.abspath(__file__)), trace, node))
    p = subprocess.Popen([sys.executable, "-c", script], env=child_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=functools.partial(default_action, sig))
    try:
        line = p.stdout.readline()
        assert line.strip() == "LOCKED", p.stderr.read()
        assert all(lo is not None for lo, _ in read_locks(node))
        p.send_signal(sig)
        p.wait(timeout=HANG_S)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == -sig, p.stderr.read()
    assert read_locks(node) == [(None, None), (None, None)]
    lines = open(trace).read().splitlines()
    assert lines and all(json.loads(l) for l in lines)  # every line complete


def test_an_ignored_hangup_stays_ignored(node):
    """A program started under nohup ignores SIGHUP; the session keeps it that way (its handler
    is installed only over the default action or a Python one): the program lives on with its
    clocks held, and restores them when it ends."""
    script = textwrap.dedent("""
        import sys
        sys.path.insert(0, %r)
        import eerl
        from test_session import run_until_locked, POOLS
        s = eerl.Session(pools=POOLS)
        run_until_locked(s, %r)
        print("LOCKED", flush=True)
        sys.stdin.readline()  # the hangup arrives while it waits here
        print("ALIVE", flush=True)
        s.close()
    """ % (os.path.dirname(os.path.abspath(__file__)), node))
    p = subprocess.Popen([sys.executable, "-c", script], env=child_env(), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        assert p.stdout.readline().strip() == "LOCKED", p.stderr.read()
        p.send_signal(signal.SIGHUP)
        assert all(lo is not None for lo, _ in read_locks(node))
        out, err = p.communicate("go\n", timeout=HANG_S)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0 and out.strip() == "ALIVE", err
    assert read_locks(node) == [(None, None), (None, None)]


def default_action(sig):
    """preexec_fn: the child starts with sig's default action, as a program run by a supervisor
    does. An ignored disposition is inherited through exec (nohup ignores SIGHUP; a shell without
    job control starts its background commands ignoring SIGQUIT), and eerl leaves an ignored
    signal ignored, so a test suite started that way would see the child live on. SIGQUIT's
    default action also dumps core; the test wants only the exit status."""
    import resource
    signal.signal(sig, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def test_sigterm_runs_the_programs_handler_first_with_the_session_open(node, tmp_path):
    """A training script that traps SIGTERM to checkpoint (a preemption, Slurm's --signal): its
    handler runs with the session open, saves the controller state; the update in flight still
    ends; the process exits as the program decides, and the clocks are restored on the way out."""
    state = str(tmp_path / "eerl.state")
    script = textwrap.dedent("""
        import os, signal, sys
        sys.path.insert(0, %r)
        import eerl
        from test_session import run_until_locked, POOLS
        saved = []
        signal.signal(signal.SIGTERM, lambda n, f: saved.append(s.save_state(%r)))
        s = eerl.Session(pools=POOLS)
        run_until_locked(s, %r)  # mid-update, in a phase, clocks locked
        os.kill(os.getpid(), signal.SIGTERM)  # Python runs the handler before the next line
        print("SAVED", saved == [%r], flush=True)
        for ph in [p for p in ("generation", "training") if p in [k for k, _, _ in s._open_phases]]:
            s.phase_end(ph)
        m = s.update_end(generated_tokens=100, valid_tokens=90, longest_response=10)
        print("UPDATE", m["eerl/update"] > 0, flush=True)
        sys.exit(3)  # the program's own exit: eerl restores at the interpreter's exit
    """ % (os.path.dirname(os.path.abspath(__file__)), state, node, state))
    r = subprocess.run([sys.executable, "-c", script], env=child_env(), capture_output=True,
                       text=True, timeout=HANG_S)
    assert r.returncode == 3, r.stderr
    assert r.stdout.split() == ["SAVED", "True", "UPDATE", "True"], r.stdout + r.stderr
    assert os.path.getsize(state) > 0
    assert read_locks(node) == [(None, None), (None, None)]


def test_a_forked_child_leaves_the_parents_clocks_alone(node):
    """A child forked mid-phase (os.fork, a fork-started data loader worker) that exits normally
    runs the interpreter's exit (which closes live sessions): it must not hang on the parent's
    meter thread nor reset the GPUs the parent has locked, and the session refuses it; the
    parent carries on and restores its clocks itself."""
    script = textwrap.dedent("""
        import os, sys, time
        sys.path.insert(0, %r)
        import eerl
        from test_session import run_until_locked, POOLS
        from conftest import read_locks
        s = eerl.Session(pools=POOLS)
        run_until_locked(s, %r)  # in a phase, clocks locked
        locked = read_locks(%r)
        pid = os.fork()
        if pid == 0:
            try:
                s.update_end(1, 1, 1)
                print("CHILD used the session", flush=True)
            except eerl.EerlError as e:
                print("CHILD refused:", e, flush=True)
            sys.exit(0)  # the interpreter's exit: atexit closes the live sessions
        t0 = time.monotonic()
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() - t0 > 120:  # a hang guard
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                print("CHILD hung", flush=True)
                break
            time.sleep(0.02)
        print("AFTER", read_locks(%r) == locked, flush=True)
        s.close()
        print("CLOSED", read_locks(%r), flush=True)
    """ % (os.path.dirname(os.path.abspath(__file__)), node, node, node, node))
    r = subprocess.run([sys.executable, "-c", script], env=child_env(), capture_output=True,
                       text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert "CHILD hung" not in out, r.stdout
    assert out[0].startswith("CHILD refused:") and "forked child" in out[0], r.stdout
    assert "AFTER True" in out, r.stdout
    assert out[-1] == "CLOSED [(None, None), (None, None)]", r.stdout


def test_a_second_session_on_the_same_gpus_is_refused(node):
    """Two sessions in one process driving one GPU would fight over its clock (through eerld the
    second lease is EERL_EBUSY): the second is refused, naming the GPU; other GPUs, an
    observe-only session, and the same GPU after the first closes are fine."""
    one = {"generation": [0], "training": [0]}
    with eerl.Session(pools=one):
        with pytest.raises(eerl.EerlError) as e:
            eerl.Session(pools={"generation": [1, 0], "training": [1, 0]})
        assert e.value.name == "EERL_EBUSY"
        assert "GPU 0 (GPU-00000000-0000-0000-0000-000000000000) is already driven by another " \
               "eerl session in this process (pid %d)" % os.getpid() in str(e.value)
        eerl.Session(pools={"generation": [1], "training": [1]}).close()  # GPU 1 was not kept
        eerl.Session(pools=one, observe_only=True).close()
    eerl.Session(pools=one).close()


def test_normal_exit_without_close_restores_clocks(node):
    script = textwrap.dedent("""
        import sys
        sys.path.insert(0, %r)
        import eerl
        from test_session import run_until_locked, POOLS
        keep = eerl.Session(pools=POOLS)
        run_until_locked(keep, %r)
        print("LOCKED", flush=True)
    """ % (os.path.dirname(os.path.abspath(__file__)), node))
    r = subprocess.run([sys.executable, "-c", script], env=child_env(), capture_output=True,
                       text=True, timeout=HANG_S)
    assert r.returncode == 0 and r.stdout.strip() == "LOCKED", r.stderr
    assert read_locks(node) == [(None, None), (None, None)]


def test_save_state_and_resume(node, tmp_path):
    """A job segment saves the controller state next to its checkpoint; the next segment resumes
    from the checkpoint directory and skips calibration. Another allocation, or a strategy that
    does not resume, starts fresh and says why; a damaged file is an error naming it."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    trace1 = str(tmp_path / "seg1.jsonl")
    with eerl.Session(mode="colocated", pools=POOLS, strategy="eerl", resume_from=ckpt,
                      trace=trace1) as s:
        assert not s.resumed and "no saved state" in s.resume_detail
        for u in range(14):  # calibration is 10 governor updates for the eerl strategy
            m = one_update(s, u)
        assert m["eerl/state"] != "calibrating"
        refs = s.status()["references"]
        assert refs >= 10
        saved = s.save_state(ckpt)
    assert saved == str(ckpt / "eerl-controller.state") and os.path.getsize(saved) > 0
    with pytest.raises(eerl.EerlError, match="closed"):
        s.save_state(ckpt)

    trace2 = str(tmp_path / "seg2.jsonl")
    with eerl.Session(mode="colocated", pools=POOLS, strategy="eerl", resume_from=ckpt,
                      trace=trace2) as s:
        assert s.resumed and "resumed from" in s.resume_detail
        st = s.status()
        assert st["state"] != "calibrating" and st["references"] == refs
        m = one_update(s, 0)
        assert m["eerl/state"] != "calibrating"
    lines = [json.loads(l) for l in open(trace2)]
    rec = [l for l in lines if l.get("type") == "resume"]
    assert len(rec) == 1 and rec[0]["resumed"] and len(rec[0]["state"]) > 100
    # The resumed trace replays to the same decisions.
    r = subprocess.run([EERL_BIN, "replay", "--quiet", trace2], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "0 mismatches" in r.stdout

    # Another allocation (one GPU instead of two): a fresh search, said in the first events.
    trace3 = str(tmp_path / "seg3.jsonl")
    with eerl.Session(mode="colocated", pools={"generation": [0], "training": [0]},
                      strategy="eerl", resume_from=saved, trace=trace3) as s:
        assert not s.resumed
        assert "allocation changed" in s.resume_detail and "fresh search" in s.resume_detail
        assert one_update(s, 0)["eerl/state"] == "calibrating"
    first = [json.loads(l) for l in open(trace3) if '"update"' in l][0]
    assert any("resume refused" in e["reason"] for e in first["events"])
    # The paper's strategy does not resume: a fresh start, not an error.
    with eerl.Session(mode="colocated", pools=POOLS, strategy="paper", resume_from=ckpt) as s:
        assert not s.resumed and "does not resume" in s.resume_detail
    # A damaged file: an error naming the file.
    with open(saved, "r+b") as f:
        f.truncate(os.path.getsize(saved) - 5)
    with pytest.raises(eerl.EerlError, match="eerl-controller.state"):
        eerl.Session(mode="colocated", pools=POOLS, strategy="eerl", resume_from=ckpt)
