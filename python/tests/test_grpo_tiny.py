"""examples/grpo_tiny.py: a few GRPO updates on the CPU with eerl observing (stand-in NVML), the
trace it writes read back by the eerl CLI, and its argument errors."""

import json
import os
import subprocess
import sys

import pytest

from conftest import EERL_BIN, REPO, child_env

SCRIPT = os.path.join(REPO, "examples", "grpo_tiny.py")


def run_grpo(mode, trace, updates=3):
    r = subprocess.run([sys.executable, SCRIPT, "--config", "tiny", "--updates", str(updates),
                        "--eerl", mode, "--eerl-gpus", "0,1", "--trace", trace, "--seed", "7"],
                       env=child_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]


def test_grpo_tiny_observe_only_writes_a_trace_the_cli_reads(node, tmp_path):
    trace = str(tmp_path / "governor.jsonl")
    recs = run_grpo("observe", trace)
    assert [x["update"] for x in recs] == [0, 1, 2]
    for x in recs:
        assert x["N"] <= x["G"] and x["L"] <= x["G"] and x["version"] == x["update"] + 1
        assert x["eerl/accepted"] == 1 and x["eerl/update_energy_j"] > 0
        assert x["eerl/gen_mhz"] == 0  # observe-only: the governor runs
    lines = [json.loads(l) for l in open(trace)]
    run = [l for l in lines if l["type"] == "run"][0]
    assert run["seed"] == 7 and run["role"] == "governor" and run["observe_only"] is True
    ups = [l for l in lines if l["type"] == "update"]
    assert [(u["work"]["G"], u["work"]["N"], u["work"]["L"]) for u in ups] == \
        [(x["G"], x["N"], x["L"]) for x in recs]
    assert set(ups[0]["phases"]) == {"generation", "logprob", "training", "refit"}
    rp = subprocess.run([EERL_BIN, "replay", trace], capture_output=True, text=True, timeout=60)
    assert rp.returncode == 0, rp.stderr
    assert "replayed 3 updates (0 refused)" in rp.stdout and "0 mismatches" in rp.stdout
    # eerl analyze pairs it with a controller run of the same seed
    ctl = str(tmp_path / "controller.jsonl")
    run_grpo("on", ctl)
    an = subprocess.run([EERL_BIN, "analyze", "--json", trace, ctl], capture_output=True,
                        text=True, timeout=60)
    assert an.returncode == 0, an.stderr
    assert "7" in an.stdout


@pytest.mark.parametrize("args,msg", [
    (["--updates", "0"], "--updates must be at least 1, not 0"),
    (["--group", "1"], "--group must be at least 2"),
    (["--device", "warp-drive"], "--device 'warp-drive'"),
    (["--min-n", "9", "--max-n", "3"], "need 1 <= --min-n <= --max-n, got 9 and 3"),
    (["--alphabet", "4"], "--alphabet must be at least 10"),
])
def test_grpo_tiny_bad_arguments(args, msg, capsys):
    import importlib.util
    spec = importlib.util.spec_from_file_location("grpo_tiny", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(SystemExit) as e:
        mod.main(args)
    assert e.value.code == 2 and msg in capsys.readouterr().err
