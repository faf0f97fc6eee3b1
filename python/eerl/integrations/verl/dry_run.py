"""A dry run of eerl with verl on a machine without GPUs (a laptop; docs/integrations/verl.md,
"A dry run without GPUs"):

    python -m eerl.integrations.verl.dry_run [verl's Hydra overrides] [+eerl.trace=run.jsonl ...]

Runs verl's own v1 trainer (trainer.v1.trainer_mode: sync, the default, colocate_async or
separate_async) for trainer.total_training_steps steps (default 3) with eerl's hook installed,
as the one-line entry installs it, the GPU work replaced by the stand-ins of
eerl.integrations.verl.cpu_standins (its docstring says what is verl's and what is ours).

Ray: a local instance of its own, on 127.0.0.1 only (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 set
before Ray is imported; without it Ray swaps 127.0.0.1 for the machine's outward address), no
dashboard, no usage report, its files in a fresh folder under $TMPDIR (RAY_TMPDIR as well),
shut down and removed at the end, whatever happens.

eerl's session: with eerld on PATH (built from source: docs/eerld.md), an eerld of the dry run's
own serves three simulated GPUs (--devices twin:h100x3) on a socket in that folder, stopped at
the end, and an eerl.Session runs over it (colocated on GPUs 0, 1; separate_async: drained, rollout
on GPU 2), writing +eerl.trace. Without eerld, the hook drives a recording session of ours (the
phases and the work eerl would be told; no session, no trace).

Prints one line per update (phases, G, N, L, policy version, eerl's state) and the trace's path.
Exit 0 when every step ran; 2 for an option it refuses; 1 when the run failed (the error
printed). Bounded: after TIMEOUT_S the run stops, Ray and eerld stopped, exit 1.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

TIMEOUT_S = 900
MODES = ("sync", "colocate_async", "separate_async")
# +eerl.KEY options of the dry run: eerl.Session's keywords that make sense on simulated GPUs
OPTIONS = ("trace", "observe_only", "allowed_loss", "strategy")
TWIN_GPUS = 3
# Ray's sockets are <its folder>/session_<date>_<time>_<us>_<pid>/sockets/plasma_store, and a
# Unix socket's path has at most 107 bytes: the folder's path may have this many
RAY_DIR_MAX = 107 - 65


class Refused(Exception):
    """An argument the dry run does not take (exit 2)."""


def ray_on_loopback(tmp):
    """The environment Ray reads when imported: loopback only, files under tmp, no usage report.
    Refuses when Ray was imported already (its loopback setting would not take)."""
    if len(tmp) > RAY_DIR_MAX:
        raise Refused("the temporary folder %s is too long a path for Ray's sockets (Unix "
                      "sockets' paths have at most 107 bytes): set TMPDIR to a short one, "
                      "e.g. TMPDIR=/tmp" % tmp)
    if "ray" in sys.modules:
        raise Refused("Ray was imported before the dry run could keep it on loopback: run the "
                      "dry run in a fresh process (python -m eerl.integrations.verl.dry_run)")
    os.makedirs(os.path.join(tmp, "ray"), exist_ok=True)
    os.environ.update({"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_TMPDIR": tmp,
                       "RAY_USAGE_STATS_ENABLED": "0"})


def _value(text):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return float(text)
    except ValueError:
        return text


def parse(argv):
    """argv -> (mode, steps, verl's overrides, {eerl option: value})."""
    mode, steps, verl_ov, eerl = "sync", 3, [], {}
    for a in argv:
        key, eq, val = a.partition("=")
        if not eq:
            raise Refused("%r: give verl's Hydra overrides (KEY=VALUE) and eerl's options "
                          "(+eerl.KEY=VALUE)" % a)
        if key.startswith("+eerl."):
            k = key[len("+eerl."):]
            if k not in OPTIONS:
                raise Refused("%s: the dry run has no such option; its options are %s"
                              % (key, ", ".join("+eerl." + o for o in OPTIONS)))
            eerl[k] = _value(val)
            continue
        if key == "trainer.v1.trainer_mode":
            if val not in MODES:
                raise Refused("%s: the dry run runs verl's v1 trainer modes %s"
                              % (a, ", ".join(MODES)))
            mode = val
        elif key == "trainer.total_training_steps":
            steps = int(val) if val.isdigit() and int(val) > 0 else None
            if steps is None:
                raise Refused("%s: give a whole number of steps, 1 or more" % a)
        else:
            verl_ov.append(a)
    if "trace" in eerl:
        eerl["trace"] = os.path.abspath(os.path.expanduser(str(eerl["trace"])))
    return mode, steps, verl_ov, eerl


class Recorder:
    """The session as the hook sees it: each call goes to the session (or nowhere, without
    one) and is recorded: phases (name, pool) and work per update, eerl's figures after."""

    def __init__(self, session, mode):
        self.session, self.mode = session, mode
        self.current, self.updates = [], []

    def phase_begin(self, name, pool=None):
        if self.session is not None:
            self.session.phase_begin(name, pool)
        self.current.append(name if pool is None else "%s (%s pool)" % (name, pool))

    def phase_end(self, name, pool=None):
        if self.session is not None:
            self.session.phase_end(name, pool)

    def update_end(self, generated_tokens, valid_tokens, longest_response, policy_version=None,
                   update=None):
        m = {}
        if self.session is not None:
            m = self.session.update_end(generated_tokens, valid_tokens, longest_response,
                                        policy_version=policy_version, update=update)
        self.updates.append((self.current, generated_tokens, valid_tokens, longest_response,
                             policy_version, (m or {}).get("eerl/state", "-")))
        self.current = []
        return m

    def metrics(self):
        return self.session.metrics() if self.session is not None else {}


class Eerld:
    """eerld over TWIN_GPUS simulated GPUs on a socket under tmp; stop() ends it."""

    def __init__(self, binary, tmp):
        self.socket = os.path.join(tmp, "eerld.sock")
        self.log = os.path.join(tmp, "eerld.log")
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [binary, "--socket", self.socket, "--state-dir", os.path.join(tmp, "eerld-state"),
                 "--devices", "twin:h100x%d" % TWIN_GPUS, "--foreground"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                with open(self.log) as f:
                    raise RuntimeError("eerld (%s) made no socket within 30 s: %s"
                                       % (binary, f.read().strip()))
            time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _session(mode, opts, eerld):
    import eerl
    smode = "drained" if mode == "separate_async" else "colocated"
    pools = ({"generation": [2], "training": [0, 1]} if smode == "drained"
             else {"generation": [0, 1], "training": [0, 1]})
    s = eerl.Session(mode=smode, pools=pools, eerld=eerld.socket, run_info={"dry_run": True},
                     **opts)
    return s, "%s on eerld's simulated GPUs (twin:h100x%d), generation pool %s, training pool %s" \
        % (smode, TWIN_GPUS, pools["generation"], pools["training"])


def _timeout(signum, frame):
    raise TimeoutError("the dry run took longer than %d s and was stopped" % TIMEOUT_S)


def run(mode, steps, verl_ov, opts, tmp):
    """verl's trainer with the hook and the session; returns (trainer, recorder, session text)."""
    from . import cpu_standins, install
    binary = shutil.which("eerld")
    if binary is None and "trace" in opts:
        raise Refused("+eerl.trace: no eerld on PATH, so no eerl session and no trace: build "
                      "eerld (docs/eerld.md) and put it on PATH, or leave +eerl.trace out for "
                      "the hook alone")
    eerld = Eerld(binary, tmp) if binary else None
    session, said = None, ("none: no eerld on PATH (the hook drives a recording session of "
                           "ours; build eerld, docs/eerld.md, to run eerl's session)")
    try:
        if eerld is not None:
            session, said = _session(mode, opts, eerld)
        rec = Recorder(session, "drained" if mode == "separate_async" else "colocated")
        with cpu_standins.transfer_queue(temp_dir=tmp):
            hook = install(rec, strict=True)
            try:
                v1 = cpu_standins.V1Run(mode, steps=steps, overrides=verl_ov)
                v1.fit()
            finally:
                hook.uninstall()
        return v1.trainer, rec, said
    finally:
        if session is not None:
            session.close()
        if eerld is not None:
            eerld.stop()


def report(mode, trainer, rec, said, opts):
    import verl
    print("eerl dry run: verl %s's %s (trainer.v1.trainer_mode=%s) ran %d steps on the CPU; "
          "rollout, actor and weight sync were stand-ins "
          "(eerl.integrations.verl.cpu_standins)" % (verl.__version__, type(trainer).__name__,
                                                     mode, len(rec.updates)))
    print("eerl session: %s" % said)
    for i, (ph, G, N, L, v, state) in enumerate(rec.updates, 1):
        print("update %d: phases %s; G=%d N=%d L=%d tokens; policy version %s; eerl: %s"
              % (i, ", ".join(ph) or "none", G, N, L, "-" if v is None else v, state))
    if opts.get("trace"):
        with open(opts["trace"]) as f:
            n = sum(1 for line in f if '"type":"update"' in line.replace(" ", ""))
        print("trace: %s (%d update lines; python -m eerl.report draws it)" % (opts["trace"], n))
    print("Ray stopped, its files removed")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        mode, steps, verl_ov, opts = parse(argv)
        tmp = tempfile.mkdtemp(prefix="eerl-dry-run-")
    except Refused as e:
        print("eerl dry run: %s" % e, file=sys.stderr)
        return 2
    old = signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(TIMEOUT_S)
    try:
        ray_on_loopback(tmp)
        trainer, rec, said = run(mode, steps, verl_ov, opts, tmp)
    except Refused as e:
        print("eerl dry run: %s" % e, file=sys.stderr)
        return 2
    except Exception as e:  # printed, not raised: the user sees what failed and the exit code
        traceback.print_exc()
        print("eerl dry run failed: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        shutil.rmtree(tmp, ignore_errors=True)
    report(mode, trainer, rec, said, opts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
