"""The dry run of docs/integrations/verl.md ("A dry run without GPUs"), typed as the page gives
it: verl's trainer on the CPU stand-ins, eerl's session over an eerld of simulated GPUs (eerld on
PATH), Ray on loopback in a folder of its own that is gone after, no Ray process left."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import BUILD, HANG_S, REPO, child_env

DOC = os.path.join(REPO, "docs", "integrations", "verl.md")


def documented_command():
    """The dry run's command line as the page gives it (its first line that runs the module)."""
    text = open(DOC).read()
    found = re.findall(r"^(python -m eerl\.integrations\.verl\.dry_run\b.*)$", text, re.M)
    assert found, "docs/integrations/verl.md gives no dry-run command"
    return shlex.split(found[0])


def user_env(path, tmp):
    """A user's environment: none of the tests' Ray settings, TMPDIR=tmp, PATH as given."""
    env = child_env(PATH=path, TMPDIR=tmp)
    for k in ("RAY_TMPDIR", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "EERL_TEST_RAY_OWNER"):
        env.pop(k, None)
    return env


def processes_mentioning(text):
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if text.encode() in f.read():
                    out.append(pid)
        except OSError:
            pass
    return out


@pytest.fixture
def user_tmp():
    # short: Ray's Unix sockets live under it (a socket path has at most 107 bytes)
    tmp = tempfile.mkdtemp(prefix="e")
    yield tmp
    shutil.rmtree(tmp, ignore_errors=True)


def test_the_documented_dry_run_runs(tmp_path, user_tmp):
    argv = documented_command()
    assert argv[:3] == ["python", "-m", "eerl.integrations.verl.dry_run"]
    work = tmp_path / "work"
    work.mkdir()
    env = user_env(BUILD + os.pathsep + os.environ["PATH"], user_tmp)  # eerld on PATH
    p = subprocess.run([sys.executable] + argv[1:], cwd=str(work), env=env,
                       capture_output=True, text=True, timeout=HANG_S)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    out = p.stdout
    assert "verl 0.9.1's PPOTrainerSync" in out and "ran 3 steps on the CPU" in out, out
    assert "colocated on eerld's simulated GPUs (twin:h100x3)" in out, out
    for i in (1, 2, 3):
        assert ("update %d: phases generation, logprob, logprob, training, refit;" % i) in out
    traces = [a.split("=", 1)[1] for a in argv if a.startswith("+eerl.trace=")]
    trace = os.path.join(str(work), traces[0])
    assert "trace: %s (3 update lines" % trace in out, out
    ups = [u for u in map(json.loads, open(trace)) if u.get("type") == "update"]
    assert len(ups) == 3 and all(u["work"]["N"] > 0 for u in ups)
    # Ray and eerld stopped; their files (Ray's session folder, eerld's socket) removed
    # (PyTorch keeps its compile cache, torchinductor_<user>, in $TMPDIR: not the dry run's)
    assert [f for f in os.listdir(user_tmp) if not f.startswith("torchinductor_")] == []
    assert processes_mentioning(user_tmp) == []


def test_a_trace_without_eerld_is_refused_before_ray_starts(tmp_path, user_tmp):
    bare = str(tmp_path / "bin")  # a PATH without eerld
    os.mkdir(bare)
    p = subprocess.run([sys.executable, "-m", "eerl.integrations.verl.dry_run",
                        "+eerl.trace=t.jsonl"], cwd=str(tmp_path), env=user_env(bare, user_tmp),
                       capture_output=True, text=True, timeout=HANG_S)
    assert p.returncode == 2, p.stderr
    assert "+eerl.trace: no eerld on PATH" in p.stderr and "docs/eerld.md" in p.stderr
    assert not (tmp_path / "t.jsonl").exists() and os.listdir(user_tmp) == []


def test_an_option_it_does_not_take_is_named(tmp_path, user_tmp):
    p = subprocess.run([sys.executable, "-m", "eerl.integrations.verl.dry_run", "+eerl.tarce=x"],
                       cwd=str(tmp_path), env=user_env(os.environ["PATH"], user_tmp),
                       capture_output=True, text=True, timeout=HANG_S)
    assert p.returncode == 2
    assert "+eerl.tarce: the dry run has no such option" in p.stderr
