"""examples/grpo_tiny.py: a few GRPO updates on the CPU with eerl observing (stand-in NVML), the
trace it writes read back by the eerl CLI, and its argument errors."""

import json
import os
import subprocess
import sys

import pytest

from conftest import child_env, EERL_BIN, HANG_S, REPO

SCRIPT = os.path.join(REPO, "examples", "grpo_tiny.py")


def run_grpo(mode, trace, updates=3):
    r = subprocess.run([sys.executable, SCRIPT, "--config", "tiny", "--updates", str(updates),
                        "--eerl", mode, "--eerl-gpus", "0,1", "--trace", trace, "--seed", "7"],
                       env=child_env(), capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    return [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]


def test_observe_without_a_gpu_says_so_in_one_line(tmp_path):
    """No NVIDIA driver: one line naming what is missing and what to do, no traceback, the
    driver's message said once."""
    env = child_env()
    env["EERL_NVML_LIBRARY"] = str(tmp_path / "no-driver" / "libnvidia-ml.so.1")
    env.pop("EERL_SOCKET", None)
    r = subprocess.run([sys.executable, SCRIPT, "--config", "tiny", "--updates", "2",
                        "--eerl", "observe"], env=env, capture_output=True, text=True,
                       timeout=HANG_S, cwd=str(tmp_path))
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("grpo_tiny: --eerl observe: opening the eerl session: opening "
                               "NVML: no NVIDIA driver"), r.stderr
    assert lines[0].count("no NVIDIA driver") == 1, r.stderr
    assert "eerld --devices twin" in lines[0] and "--eerl off" in lines[0], r.stderr


def test_grpo_tiny_observe_only_writes_a_trace_the_cli_reads(node, tmp_path):
    trace = str(tmp_path / "governor.jsonl")
    recs = run_grpo("observe", trace)
    # updates numbered from 1, the same in the log, in eerl/update and in the trace
    assert [x["update"] for x in recs] == [1, 2, 3]
    assert [x["eerl/update"] for x in recs] == [1, 2, 3]
    for x in recs:
        assert x["N"] <= x["G"] and x["L"] <= x["G"] and x["version"] == x["update"]
        assert x["eerl/accepted"] == 1 and x["eerl/update_energy_j"] > 0
        assert x["eerl/gen_mhz"] == 0  # observe-only: the governor runs
        # scoring work: the scored rows' prompts and responses (N of it), then the padding
        assert x["N"] < x["score_tokens"] <= x["padded_tokens"] or x["N"] == 0
    lines = [json.loads(l) for l in open(trace)]
    run = [l for l in lines if l["type"] == "run"][0]
    assert run["seed"] == 7 and run["role"] == "governor" and run["observe_only"] is True
    ups = [l for l in lines if l["type"] == "update"]
    assert [u["update"] for u in ups] == [1, 2, 3]
    assert [(u["work"]["G"], u["work"]["N"], u["work"]["L"]) for u in ups] == \
        [(x["G"], x["N"], x["L"]) for x in recs]
    assert set(ups[0]["phases"]) == {"generation", "logprob", "training", "refit"}
    rp = subprocess.run([EERL_BIN, "replay", trace], capture_output=True, text=True, timeout=HANG_S)
    assert rp.returncode == 0, rp.stderr
    assert "replayed 3 updates (0 refused)" in rp.stdout and "0 mismatches" in rp.stdout
    # eerl analyze pairs it with a controller run of the same seed
    ctl = str(tmp_path / "controller.jsonl")
    run_grpo("on", ctl)
    an = subprocess.run([EERL_BIN, "analyze", "--json", trace, ctl], capture_output=True,
                        text=True, timeout=HANG_S)
    assert an.returncode == 0, an.stderr
    assert "7" in an.stdout


def load_script():
    import importlib.util
    spec = importlib.util.spec_from_file_location("grpo_tiny", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_static_decode_step_matches_the_growing_prefix_step():
    """The fixed-shape step (what the GPU captures as a CUDA graph) attends the same keys as the
    eager step: same logits at every step, hence the same samples."""
    import torch
    mod = load_script()
    torch.manual_seed(3)
    model = mod.TinyLM(24, 32, 2, 2, 64, -1.0).eval()
    prompts = [[1, 4, 9, 10, 11, 3], [1, 5, 12, 3], [1, 7, 8, 9, 13, 14, 15, 3]]
    for decode in ("eager", "static"):
        torch.manual_seed(11)
        got = mod.sample(model, prompts, 20, torch.device("cpu"), False, decode)
        if decode == "eager":
            want = got
    assert got == want and any(len(r) > 3 for r in want[0])
    # step by step: logits agree to rounding
    B, P, S = 3, 8, 28
    tok = torch.full((B, P), mod.PAD, dtype=torch.long)
    valid = torch.zeros(B, S, dtype=torch.bool)
    for i, p in enumerate(prompts):
        tok[i, P - len(p):] = torch.tensor(p)
        valid[i, P - len(p):] = True
    valid[:, P:] = True
    lens = torch.tensor([len(p) for p in prompts])
    pos = (torch.arange(P)[None] - (P - lens)[:, None]).clamp(min=0)
    bias = torch.zeros(B, 1, 1, S).masked_fill(~valid[:, None, None, :], mod.NEG)
    caches = [[(torch.zeros(B, 2, S, 16), torch.zeros(B, 2, S, 16)) for _ in range(2)]
              for _ in range(2)]
    with torch.no_grad():
        for c in caches:
            model(tok, pos, mod.full_bias(valid[:, :P]), c, 0)
        dec = mod.StaticDecoder(model, caches[1], bias, lens, P, False, False)
        nxt = torch.tensor([9, 10, 11])
        for t in range(12):
            a = model(nxt[:, None], (lens + t)[:, None], bias[..., :P + t + 1], caches[0],
                      P + t)[:, -1]
            b = dec.step(nxt, t)
            assert torch.allclose(a, b, atol=1e-5), (t, (a - b).abs().max())
            nxt = a.argmax(-1)


def test_static_decoder_is_built_once_for_a_run_and_stays_exact():
    """With one cache length for the run, the second batch (other prompts, another prompt width)
    reuses the first batch's decoder, cache and all, and still samples what the eager step does:
    the slots the first batch left are closed until rewritten."""
    import torch
    mod = load_script()
    torch.manual_seed(5)
    model = mod.TinyLM(24, 32, 2, 2, 128, -1.0).eval()
    batches = [[[1, 4, 9, 10, 11, 3], [1, 5, 12, 3], [1, 7, 8, 9, 13, 14, 15, 3]],
               [[1, 6, 20, 3], [1, 4, 9, 9, 9, 9, 9, 9, 9, 9, 3], [1, 5, 3]]]
    decoders = []
    for prompts in batches:
        out = {}
        for decode in ("eager", "static"):
            torch.manual_seed(17)
            out[decode] = mod.sample(model, prompts, 20, torch.device("cpu"), False, decode,
                                     cache_len=64)
        assert out["static"] == out["eager"]
        assert any(len(r) > 3 for r in out["eager"][0])
        decoders.append([d for d in mod._DECODERS.values()])
    assert len(decoders[0]) == 1 and decoders[1][0] is decoders[0][0]


def test_manual_collection_runs_between_updates_and_is_undone(capsys):
    """--gc manual (the default): the collector is off during the loop, runs once per update
    between updates (t_gc in the log), and is back on, nothing left frozen, when main returns."""
    import gc
    mod = load_script()
    assert mod.main(["--config", "tiny", "--updates", "2", "--eerl", "off"]) == 0
    recs = [json.loads(l) for l in capsys.readouterr().out.splitlines() if l.startswith("{")]
    assert len(recs) == 2 and all(r["t_gc"] >= 0 for r in recs)
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_rows_padded_past_the_position_table_score_as_unpadded():
    """A GPU pads training rows to a multiple of 64 tokens, which can pass the model's position
    table (its length is the longest prompt plus the response limit): the padding's positions are
    clamped to the last one, and the real tokens' log-probs are those of the unpadded rows."""
    import torch
    mod = load_script()
    torch.manual_seed(3)
    model = mod.TinyLM(24, 32, 2, 2, 30, -1.0).eval()
    prompts = [[1, 4, 9, 10, 11, 3], [1, 5, 12, 3]]
    responses = [[9] * 23 + [2], [10, 11, 2]]  # the first row fills all 30 positions
    cpu = torch.device("cpu")
    lps = {}
    for pad_to in (1, 64):
        tokens, pos, valid, rmask = mod.pack(prompts, responses, [0, 1], cpu, pad_to,
                                             max_pos=model.max_len - 1)
        assert tokens.shape[1] == (30 if pad_to == 1 else 64) and int(pos.max()) == 29
        with torch.no_grad():
            lps[pad_to] = mod.token_logprobs(model, tokens, pos, valid, False)
    m = mod.pack(prompts, responses, [0, 1], cpu, 1)[3][:, 1:]
    assert torch.allclose(lps[1][m], lps[64][:, :29][m], atol=1e-5)


@pytest.mark.parametrize("args,msg", [
    (["--updates", "0"], "--updates must be at least 1, not 0"),
    (["--group", "1"], "--group must be at least 2"),
    (["--device", "warp-drive"], "--device 'warp-drive'"),
    (["--min-n", "9", "--max-n", "3"], "need 1 <= --min-n <= --max-n, got 9 and 3"),
    (["--alphabet", "4"], "--alphabet must be at least 10"),
    (["--decode", "graph"], "--decode graph needs a CUDA --device, not cpu"),
    (["--time-budget", "-5"], "--time-budget must be a positive number of seconds, not -5"),
    (["--train-device", "warp-drive"], "--train-device 'warp-drive'"),
])
def test_grpo_tiny_bad_arguments(args, msg, capsys):
    mod = load_script()
    with pytest.raises(SystemExit) as e:
        mod.main(args)
    assert e.value.code == 2 and msg in capsys.readouterr().err
