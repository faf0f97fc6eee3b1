"""python -m eerl.report: the three panels of eerl report from traces, the figures behind
panel 2, and its errors."""

import json
import math
import os
import subprocess
import sys

import pytest

from conftest import child_env

from eerl import report


def write_trace(path, role, seed, rows, peak=1980):
    """rows: (update, N, T, E, gen_mhz, train_mhz, [event kinds], state)."""
    with open(path, "w") as f:
        f.write(json.dumps({"type": "header", "format": "eerl-trace", "version": 1,
                            "mode": "colocated", "governor_peak_mhz": peak,
                            "clocks_mhz": [1980, 1500, 345]}) + "\n")
        f.write(json.dumps({"type": "run", "role": role, "seed": seed}) + "\n")
        for u, n, t, e, g, tr, kinds, state in rows:
            s = {"gen_mhz": g or "governor", "train_mhz": tr or "governor"}
            f.write(json.dumps({
                "type": "update", "update": u, "work": {"G": n, "N": n, "L": 10},
                "time_s": t, "energy_j": e, "setting": {"observed": s},
                "events": [{"kind": k, "state": state} for k in kinds]}) + "\n")
    return str(path)


def pair(tmp_path):
    gov = [(u, 1000.0, 10.0, 5000.0, 0, 0, ["hold"], "calibrating") for u in range(8)]
    ctl = [(u, 1000.0, 10.0, 5000.0, 0, 0, ["hold"], "calibrating") for u in range(4)]
    ctl += [(4, 1000.0, 10.5, 4600.0, 1500, 1500, ["propose"], "searching"),
            (5, 1000.0, 10.5, 4600.0, 1500, 1500, ["trial", "lock"], "locked"),
            (6, 1000.0, 10.5, 4600.0, 1500, 1500, ["hold"], "locked"),
            (7, 1000.0, 10.5, 4600.0, 1500, 1500, ["hold"], "locked")]
    return (write_trace(tmp_path / "gov.jsonl", "governor", 1, gov),
            write_trace(tmp_path / "ctl.jsonl", "controller", 1, ctl))


def test_changes_against_the_governor(tmp_path):
    g, c = pair(tmp_path)
    ctl, gov = report._pair([report.load(g), report.load(c)])
    assert ctl.path == c and gov.path == g
    xs, tp, pw, ep, whole = report.changes(ctl, gov)
    assert xs == list(range(8))
    # updates 2..7: time 2*10 + 4*10.5 = 62 vs 60; energy 2*5000 + 4*4600 = 28400 vs 30000
    assert whole[0] == pytest.approx(100 * (60 / 62 - 1))
    assert whole[1] == pytest.approx(100 * ((28400 / 62) / (30000 / 60) - 1))
    assert whole[2] == pytest.approx(100 * (28400 / 30000 - 1))
    # the last point averages updates 3..7: one unchanged, four at 4600/5000
    assert ep[-1] == pytest.approx(100 * ((1 + 4 * 4600 / 5000) / 5 - 1))


def test_cli_writes_png_and_svg(tmp_path):
    g, c = pair(tmp_path)
    out = str(tmp_path / "r.png")
    r = subprocess.run([sys.executable, "-m", "eerl.report", g, c, "-o", out],
                       env=child_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == out and open(out, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    svg = str(tmp_path / "r.svg")
    assert report.main([g, c, "-o", svg]) == 0
    assert b"<svg" in open(svg, "rb").read(4096)
    fig = report.figure([g, c])
    titles = [a.get_title() for a in fig.axes]
    assert "SM clocks per update" in titles[0]
    assert "energy/token %+.2f%%" % (100 * (28400 / 30000 - 1)) in titles[1]
    assert titles[2] == "energy per valid training token"


def test_errors(tmp_path, capsys):
    g, c = pair(tmp_path)
    assert report.main([g, "-o", str(tmp_path / "x.png")]) == 1
    assert "no controller trace among the 1 given" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        report.main([c, "-o", str(tmp_path / "x.pdf")])
    assert e.value.code == 2 and "must end in .png or .svg" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "update", "update": 0}\n')
    with pytest.raises(ValueError, match="update line before the header"):
        report.load(str(bad))
    bad.write_text("hello\n")
    with pytest.raises(ValueError, match="bad.jsonl:1: not a trace line"):
        report.load(str(bad))
    with pytest.raises(ValueError, match="cannot read"):
        report.load(str(tmp_path / "missing.jsonl"))
    assert not os.path.exists(str(tmp_path / "x.png"))
