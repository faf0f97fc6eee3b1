"""eerl.tracefile, the package's one trace reader (report.py and the tools read through it), on
traces the C runtime wrote."""

import math
import subprocess

import pytest

from conftest import EERL_BIN, HANG_S

from eerl import tracefile


def test_a_simulated_trace_reads_whole_and_a_cut_one_keeps_its_whole_lines(tmp_path):
    r = subprocess.run([EERL_BIN, "sim", "--seeds", "1", "--updates", "20", "--mode",
                        "disaggregated", "--trace", str(tmp_path)], capture_output=True,
                       text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    trace = tmp_path / "seed1-controller.jsonl"
    t = tracefile.read(trace)
    assert t.header["mode"] == "disaggregated" and t.run is not None and t.cut is None
    assert [u["update"] for u in t.updates][-1] >= 20
    assert all(tracefile.number(u["energy_j"]) > 0 for u in t.updates)
    assert tracefile.number("nan") != tracefile.number("nan")
    assert tracefile.number("-inf") == -math.inf and tracefile.clock_mhz("governor") == 0
    text = trace.read_text()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text + '{"type":"node_lost","node":1}\n{"type":"upd')
    with pytest.warns(RuntimeWarning, match=r"cut.jsonl:\d+: the last line is cut short"):
        t2 = tracefile.read(cut)
    assert len(t2.updates) == len(t.updates) and t2.others == [{"type": "node_lost", "node": 1}]
    assert t2.cut == len(text.splitlines()) + 2
    broken = tmp_path / "broken.jsonl"
    broken.write_text(text.replace('{"type":"update"', '{"type":update', 1))
    with pytest.raises(tracefile.TraceError, match=r"broken.jsonl:\d+: not a trace line"):
        tracefile.read(broken)
