"""eerl.report, the one implementation of the report's pictures (`eerl report` and
`python -m eerl.report`): the panels from traces (with a controller run, and governor-only), the
figures behind them, what a single run's picture must not mislead about, and its errors."""

import json
import math
import os
import subprocess
import sys

import pytest

from conftest import child_env, EERL_BIN, HANG_S

from eerl import report


def write_trace(path, role, seed, rows, peak=1980):
    """rows: (update, N, T, E, gen_mhz, train_mhz, [event kinds], state); generation takes 60%
    of each update's time and energy, training the rest."""
    with open(path, "w") as f:
        f.write(json.dumps({"type": "header", "format": "eerl-trace", "version": 1,
                            "mode": "colocated", "governor_peak_mhz": peak,
                            "clocks_mhz": [1980, 1500, 345],
                            "config": {"allowed_loss": 0.02}}) + "\n")
        f.write(json.dumps({"type": "run", "role": role, "seed": seed}) + "\n")
        for u, n, t, e, g, tr, kinds, state in rows:
            s = {"gen_mhz": g or "governor", "train_mhz": tr or "governor"}
            f.write(json.dumps({
                "type": "update", "update": u, "work": {"G": n, "N": n, "L": 10},
                "time_s": t, "energy_j": e, "setting": {"observed": s},
                "phases": {"generation": {"time_s": 0.6 * t, "energy_j": 0.6 * e},
                           "training": {"time_s": 0.4 * t, "energy_j": 0.4 * e}},
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


def test_cut_last_line_keeps_the_whole_ones(tmp_path):
    """A trace whose last line a full disk or a crash cut short is read up to its last whole
    line, with a warning naming the cut line; a broken line elsewhere is still refused."""
    g, c = pair(tmp_path)
    text = open(c).read()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text[:-40])
    with pytest.warns(RuntimeWarning, match="cut.jsonl:10: the last line is cut short"):
        r = report.load(str(cut))
    assert r.update == list(range(7))
    lines = text.splitlines(True)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(lines[:5] + [lines[5][:30] + "\n"] + lines[6:]))
    with pytest.raises(ValueError, match="bad.jsonl:6: not a trace line"):
        report.load(str(bad))


def test_cli_writes_png_and_svg(tmp_path):
    g, c = pair(tmp_path)
    out = str(tmp_path / "r.png")
    r = subprocess.run([sys.executable, "-m", "eerl.report", g, c, "-o", out],
                       env=child_env(), capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == ("python -m eerl.report: wrote %s (controller run ctl.jsonl "
                                "against governor run gov.jsonl)" % out)
    assert open(out, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    svg = str(tmp_path / "r.svg")
    assert report.main([g, c, "-o", svg]) == 0
    assert b"<svg" in open(svg, "rb").read(4096)
    fig = report.figure([g, c])
    titles = [a.get_title() for a in fig.axes]
    assert "SM clocks per update" in titles[0]
    assert "energy/token %+.2f%%" % (100 * (28400 / 30000 - 1)) in titles[1]
    assert "power per phase" in titles[2] and "per setting" in titles[3]
    assert titles[4] == "energy per valid training token"
    # the allowance (2%, Table 3's default) as a line on the throughput panel and per setting
    for a in (fig.axes[1], fig.axes[3]):
        assert any(l.get_label() == "allowance (-2%)" and list(l.get_ydata()) == [-2, -2]
                   for l in a.get_lines()), [l.get_label() for l in a.get_lines()]
    # Figure 1: generation power, governor 5000 * 0.6 / 6 = 500 W, controller 4600 * 0.6 / 6.3
    gen = [l for l in fig.axes[2].get_lines() if l.get_color() == "#1f77b4"]
    assert [round(v, 6) for v in gen[0].get_ydata()[-1:]] == [round(4600 / 10.5, 6)]
    assert round(gen[1].get_ydata()[-1], 6) == 500.0
    assert [a.get_ylabel() for a in fig.axes] == [
        "SM clock (MHz)", "change (%)", "power (W)", "change (%)", "energy (J / token)"]
    assert fig.axes[3].get_xlabel() == "setting: generation/training SM clock (MHz)"


def test_per_setting_and_phase_power(tmp_path):
    g, c = pair(tmp_path)
    ctl, gov = report._pair([report.load(g), report.load(c)])
    rows = report.per_setting(ctl, gov)
    assert [r[0] for r in rows] == ["Gov/Gov", "1500/1500"] and [r[4] for r in rows] == [2, 4]
    assert rows[0][1:4] == (0.0, 0.0, 0.0)
    assert rows[1][1] == pytest.approx(100 * (10 / 10.5 - 1))
    assert rows[1][2] == pytest.approx(100 * ((4600 / 10.5) / 500 - 1))
    assert rows[1][3] == pytest.approx(100 * (4600 / 5000 - 1))
    assert report.phase_power(gov, "training")[0] == pytest.approx(500.0)
    assert math.isnan(report.phase_power(gov, "logprob")[0])


def test_governor_only_traces_are_plotted(tmp_path):
    """Observe-only, a cluster's first run: power and energy per phase and energy per token."""
    g, _ = pair(tmp_path)
    fig = report.figure([g])
    titles = [a.get_title() for a in fig.axes]
    assert len(titles) == 3 and "observe-only" in titles[0] and "power per phase" in titles[0]
    assert "energy per phase" in titles[1] and titles[2] == "energy per valid training token"
    labels = [l.get_label() for l in fig.axes[0].get_lines()]
    assert labels[:3] == ["generation", "log-prob", "training"]
    out = str(tmp_path / "gov.png")
    assert report.main([g]) == 0 and open(out, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_one_observe_only_run_has_its_units(tmp_path):
    """One observe-only session on two idle GPUs (105 W each): its panels say 210 W and 10.5 J
    per 50 ms generation phase, every axis with its unit, and no empty comparison panel."""
    rows = [(u, 900.0, 0.08, 16.8, 0, 0, [], "calibrating") for u in range(1, 7)]
    path = write_trace(tmp_path / "run.jsonl", "governor", 0, rows)
    with open(path) as f:  # as eerl.Session(observe_only=True) writes it: no role
        lines = f.read().replace('"role": "governor", ', '"observe_only": true, ')
    with open(path, "w") as f:
        f.write(lines)
    fig = report.figure([path])
    assert [a.get_ylabel() for a in fig.axes] == ["power (W)", "energy (J)", "energy (J / token)"]
    assert [a.get_xlabel() for a in fig.axes] == ["update"] * 3
    gen = fig.axes[0].get_lines()[0]
    assert gen.get_label() == "generation" and gen.get_ydata()[0] == pytest.approx(210.0)
    assert fig.axes[1].get_lines()[0].get_ydata()[0] == pytest.approx(0.6 * 16.8)


def test_controller_run_alone_gets_no_empty_panels(tmp_path):
    """A controller trace without its governor run: clocks, power per phase, energy per token."""
    _, c = pair(tmp_path)
    fig = report.figure([c])
    assert [a.get_ylabel() for a in fig.axes] == [
        "SM clock (MHz)", "power (W)", "energy (J / token)"]
    assert not any("no governor" in a.get_title() for a in fig.axes)
    assert fig.axes[1].get_title() == "power per phase (whole allocation), controller run"


def test_units_keep_tick_labels_short():
    assert report.unit(210.0, report.WATT) == (1.0, "W")
    assert report.unit(999.9, report.WATT) == (1.0, "W")
    assert report.unit(24000.0, report.WATT) == (1000.0, "kW")
    assert report.unit(1.5e6, report.JOULE) == (1e6, "MJ")
    assert report.unit(5e13, report.JOULE) == (1e9, "GJ")


def test_errors(tmp_path, capsys):
    g, c = pair(tmp_path)
    assert report.main([str(tmp_path), "-o", str(tmp_path / "x.png")]) == 1
    assert "is a directory; give the traces in it" in capsys.readouterr().err
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


def test_without_matplotlib_says_what_to_install(tmp_path):
    g, c = pair(tmp_path)
    code = ("import sys; sys.modules['matplotlib'] = None; from eerl import report; "
            "sys.exit(report.main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, g, c, "-o", str(tmp_path / "x.png")],
                       env=child_env(), capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "matplotlib is not installed: pip install matplotlib" in r.stderr, r.stderr
    assert not os.path.exists(str(tmp_path / "x.png"))


def _eerl_report(*args, **env):
    """`eerl report ARGS` (the C command), which hands its arguments to this Python's
    eerl.report."""
    return subprocess.run([EERL_BIN, "report"] + list(args),
                          env=child_env(EERL_PYTHON=sys.executable, **env), capture_output=True,
                          text=True, timeout=HANG_S)


def test_the_eerl_command_draws_through_the_package(tmp_path):
    g, c = pair(tmp_path)
    r = _eerl_report(g, c, "-o", str(tmp_path / "r.svg"))
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == ("eerl report: wrote %s (controller run ctl.jsonl against "
                                "governor run gov.jsonl)" % (tmp_path / "r.svg"))
    assert b"<svg" in open(str(tmp_path / "r.svg"), "rb").read(4096)
    r = _eerl_report(g)  # the default output: the first trace's name with .png
    assert r.returncode == 0 and "(observe-only: governor run gov.jsonl)" in r.stderr, r.stderr
    assert open(str(tmp_path / "gov.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert "usage: eerl report" in _eerl_report("--help").stdout


@pytest.mark.parametrize("args,rc,msg", [
    (["{c}", "-o", "{t}/r.jpg"], 2, "output '{t}/r.jpg' must end in .png or .svg"),
    (["-o", "{t}/x.png"], 2, "the following arguments are required: TRACE.jsonl"),
    (["{t}", "-o", "{t}/x.png"], 1, "'{t}' is a directory; give the traces in it"),
    (["{t}/none.jsonl", "-o", "{t}/x.png"], 1, "cannot read {t}/none.jsonl"),
    (["{c}", "-o", "{t}/no/such/x.png"], 1, "cannot write '{t}/no/such/x.png'"),
])
def test_the_eerl_command_names_bad_input_and_leaves_nothing(tmp_path, args, rc, msg):
    g, c = pair(tmp_path)
    before = sorted(os.listdir(str(tmp_path)))
    r = _eerl_report(*[a.format(c=c, t=tmp_path) for a in args])
    assert r.returncode == rc and "Traceback" not in r.stderr, r.stderr
    assert ("eerl report: " in r.stderr and msg.format(t=tmp_path) in r.stderr), r.stderr
    assert sorted(os.listdir(str(tmp_path))) == before


def test_a_single_run_does_not_mislead(tmp_path):
    """A short run behind a twin eerld: generation and training both at the governor's clock,
    power that wobbles by 0.3%, no seed. The power axis starts at zero, the generation line is
    drawn over the training line (dashed), the clock legend lists only what happened, and the
    run is named by its file, not by a seed it does not have."""
    rows = [(u, 900.0, 0.08, 16.8 + 0.05 * (u % 2), 0, 0, ["hold"], "calibrating")
            for u in range(1, 11)]
    rows += [(11, 900.0, 0.08, 16.0, 0, 1500, ["propose"], "searching")]
    path = write_trace(tmp_path / "run.jsonl", "controller", None, rows)
    with open(path) as f:  # as eerl.Session writes it: no role, no seed
        text = f.read().replace('"role": "controller", "seed": null', '"observe_only": false')
    with open(path, "w") as f:
        f.write(text)
    fig = report.figure([path])
    clocks, power, ept = fig.axes
    assert power.get_ylim()[0] == 0 and ept.get_ylim()[0] == 0
    lines = {l.get_label(): l for l in clocks.get_lines()}
    gen, train = lines["generation"], lines["training"]
    assert clocks.get_lines().index(gen) > clocks.get_lines().index(train)  # drawn on top
    assert gen.get_linestyle() != "-" and train.get_linestyle() == "-"
    legend = [t.get_text() for t in clocks.get_legend().get_texts()]
    assert sorted(legend) == ["calibration", "generation", "training", "trial starts"], legend
    assert [t.get_text() for t in ept.get_legend().get_texts()] == ["controller (run.jsonl)"]


def test_the_titles_say_what_happened_and_what_it_saved(tmp_path):
    """A single controller run: its first panel's title holds the trace's closing estimate and
    the energy used, and says where the controller locked; a run that never calibrated says
    "calibration only"; an observe-only run's title is the self-check."""
    rows = [(u, 1000.0, 10.0, 5000.0, 0, 0, ["hold"], "calibrating") for u in range(1, 5)]
    rows += [(5, 1000.0, 10.0, 5000.0, 0, 0, ["calibrated"], "searching"),
             (6, 1000.0, 10.5, 4600.0, 1500, 1260, ["propose"], "searching"),
             (7, 1000.0, 10.5, 4600.0, 1500, 1260, ["lock"], "locked"),
             (8, 1000.0, 10.5, 4600.0, 1500, 1260, ["hold"], "locked")]
    path = write_trace(tmp_path / "ctl.jsonl", "controller", None, rows)
    est = {"type": "estimate", "update": 8, "judged": True, "saving_pct": 8.36,
           "saving_ci_pct": [7.74, 8.99], "throughput_change_pct": -1.43,
           "throughput_ci_pct": [-2.44, -0.42], "updates": 7}
    with open(path) as f:
        text = f.read().replace('{"kind": "lock", "state": "locked"}', json.dumps(
            {"kind": "lock", "state": "locked", "next": {"gen_mhz": 1500, "train_mhz": 1260}}))
    with open(path, "w") as f:
        f.write(text + json.dumps(est) + "\n")
    title = report.figure([path]).axes[0].get_title()
    assert title.splitlines()[0] == ("10.8 Wh used over 8 updates; estimated saving 8.4% "
                                     "[7.7, 9.0] (90%), throughput -1.4% [-2.4, -0.4]"), title
    assert "ctl.jsonl: locked at 1500/1260 after update 7" in title

    calib = write_trace(tmp_path / "calib.jsonl", "controller", None, rows[:4])
    title = report.figure([calib]).axes[0].get_title()
    assert "calib.jsonl: calibration only (4 updates)" in title
    assert "no estimate in the trace (eerl analyze calib.jsonl computes it)" in title

    obs = write_trace(tmp_path / "obs.jsonl", "governor", 0, rows[:4])
    with open(obs, "a") as f:
        f.write(json.dumps(dict(est, saving_pct=0.1, saving_ci_pct=[-0.4, 0.6])) + "\n")
    title = report.figure([obs]).axes[0].get_title()
    assert "observe-only self-check" in title
    assert "estimated saving 0.1% [-0.4, 0.6] (90%), holds 0 as it should" in title
