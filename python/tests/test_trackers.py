"""What eerl's figures look like where a TRL user reads them (docs/what-eerl-did.md): a tiny GRPO
training with EerlCallback and report_to each tracker a TRL user picks (TensorBoard, MLflow on a
local file store, Trackio local), its values read back with that tracker's own reader and
compared with what TRL logged; the end-of-run line printed once. Everything stays in the test's
temporary folder: no server, no upload, no home-directory cache."""

import math
import os
import sys

import pytest

from conftest import HERE

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

from eerl.integrations import trl as eerl_trl  # noqa: E402

sys.path.insert(0, HERE)
import trl_tiny  # noqa: E402

STEPS = 4


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return trl_tiny.build_model(str(tmp_path_factory.mktemp("tiny")))


@pytest.fixture
def eerld_node(tmp_path, monkeypatch):
    import eerld_nodes
    n = eerld_nodes.start_nodes(tmp_path / "eerld", 1)[0]
    monkeypatch.setenv("EERL_SOCKET", n.socket)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    try:
        yield n
    finally:
        n.stop()


@pytest.fixture
def local_only(tmp_path, monkeypatch):
    """Every tracker's files and caches under tmp_path; no telemetry, no upload, no server."""
    home = tmp_path / "home"
    home.mkdir()
    for k, v in {"HOME": home, "XDG_CACHE_HOME": home / ".cache", "HF_HOME": home / "hf",
                 "TRACKIO_DIR": tmp_path / "trackio", "MLFLOW_TRACKING_URI":
                 "file:" + str(tmp_path / "mlruns"), "HF_HUB_OFFLINE": "1",
                 "HF_HUB_DISABLE_TELEMETRY": "1", "GRADIO_ANALYTICS_ENABLED": "False",
                 "DO_NOT_TRACK": "1", "MLFLOW_ENABLE_ASYNC_LOGGING": "false",
                 "DISABLE_MLFLOW_INTEGRATION": "FALSE",
                 # MLflow 3 keeps the file store (maintenance mode) behind this switch
                 "MLFLOW_ALLOW_FILE_STORE": "true"}.items():
        monkeypatch.setenv(k, str(v))
    for k in ("TRACKIO_SPACE_ID", "TRACKIO_BUCKET_ID", "MLFLOW_RUN_ID", "WANDB_MODE"):
        monkeypatch.delenv(k, raising=False)
    # trackio reads TRACKIO_DIR once, at import (an earlier test's transformers may have imported
    # it): its modules' copies of the folders point into this test's folder too.
    import sys
    for name, mod in list(sys.modules.items()):
        if name == "trackio" or name.startswith("trackio."):
            for attr, sub in (("TRACKIO_DIR", ""), ("MEDIA_DIR", "media"),
                              ("ARTIFACTS_DIR", "artifacts")):
                if hasattr(mod, attr):
                    monkeypatch.setattr(mod, attr, (tmp_path / "trackio" / sub) if sub
                                        else tmp_path / "trackio")
    return tmp_path


def train(model_dir, out, tracker, capfd):
    cb = eerl_trl.EerlCallback(trace=os.path.join(out, "eerl.jsonl"), observe_only=True)
    t = trl_tiny.trainer(model_dir, out, max_steps=STEPS, report_to=[tracker], callbacks=[cb],
                         run_name="eerl-%s" % tracker)
    with pytest.warns(UserWarning, match="GPUs of eerld at"):
        t.train()
    printed = [l for l in capfd.readouterr().out.splitlines() if l.startswith("eerl: ")]
    logged = [h for h in t.state.log_history if "eerl/observed" in h]
    return logged, printed


def check_logged(logged):
    """What TRL logged of eerl's: every figure of docs/what-eerl-did.md, numbers only."""
    assert len(logged) == STEPS
    keys = set().union(*logged)
    for k in ("eerl/state_code", "eerl/energy_total_j", "eerl/update_energy_j",
              "eerl/training_energy_j", "eerl/training_time_s", "eerl/training_power_w",
              "eerl/generation_power_w", "eerl/estimate_judged", "eerl/saving_pct"):
        assert k in keys, (k, sorted(keys))
    assert "eerl/state" not in keys  # a string: its number is eerl/state_code
    assert [h["eerl/state_code"] for h in logged] == [0] * STEPS  # calibrating
    totals = [h["eerl/energy_total_j"] for h in logged]
    assert totals == sorted(totals) and totals[0] > 0


def eerl_values(logged):
    """{key: [(step, value), ...]} of every eerl figure TRL logged."""
    out = {}
    for h in logged:
        for k, v in h.items():
            if k.startswith("eerl/"):
                out.setdefault(k, []).append((h["step"], float(v)))
    return out


def same(want, got, rel):
    assert set(got) == set(want), (sorted(set(want) ^ set(got)))
    for k in want:
        assert [s for s, _ in got[k]] == [s for s, _ in want[k]], k
        for (_, a), (_, b) in zip(want[k], got[k]):
            assert math.isclose(a, b, rel_tol=rel, abs_tol=1e-6), (k, a, b)


def check_printed(printed):
    assert len(printed) == 1, printed  # once, by global rank 0
    assert printed[0].startswith("eerl: observe-only self-check: ")
    assert "used over %d updates" % STEPS in printed[0]


def test_tensorboard_reads_back_what_eerl_logged(model_dir, eerld_node, local_only, capfd):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    out = str(local_only / "out")
    logged, printed = train(model_dir, out, "tensorboard", capfd)
    check_logged(logged)
    check_printed(printed)
    dirs = sorted({r for r, _, fs in os.walk(out) if any("tfevents" in f for f in fs)})
    assert len(dirs) == 1, dirs
    ea = EventAccumulator(dirs[0], size_guidance={"scalars": 0})
    ea.Reload()
    got = {}
    for tag in ea.Tags()["scalars"]:
        if tag.startswith("train/eerl/"):  # transformers' TensorBoardCallback adds "train/"
            got[tag[len("train/"):]] = [(e.step, e.value) for e in ea.Scalars(tag)]
    same(eerl_values(logged), got, rel=1e-6)  # float32 scalars


def test_mlflow_reads_back_what_eerl_logged(model_dir, eerld_node, local_only, capfd):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient
    out = str(local_only / "out")
    logged, printed = train(model_dir, out, "mlflow", capfd)
    check_logged(logged)
    check_printed(printed)
    client = MlflowClient(tracking_uri=os.environ["MLFLOW_TRACKING_URI"])
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    assert len(runs) == 1, runs
    run = runs[0].info.run_id
    got = {}
    for k in runs[0].data.metrics:
        if k.startswith("eerl/"):
            got[k] = sorted((m.step, m.value) for m in client.get_metric_history(run, k))
    same(eerl_values(logged), got, rel=1e-12)


def test_trackio_reads_back_what_eerl_logged(model_dir, eerld_node, local_only, capfd):
    pytest.importorskip("trackio")
    out = str(local_only / "out")
    logged, printed = train(model_dir, out, "trackio", capfd)
    check_logged(logged)
    check_printed(printed)
    from trackio.sqlite_storage import SQLiteStorage
    projects = SQLiteStorage.get_projects()
    assert len(projects) == 1, projects
    runs = SQLiteStorage.get_runs(projects[0])
    assert runs == ["eerl-trackio"], runs
    got = {}
    for row in SQLiteStorage.get_logs(projects[0], runs[0]):
        for k, v in row.items():
            if k.startswith("train/eerl/"):  # transformers' TrackioCallback adds "train/"
                got.setdefault(k[len("train/"):], []).append((row["step"], float(v)))
    same(eerl_values(logged), got, rel=1e-12)
    # nothing outside the test's folder: the database is under TRACKIO_DIR
    assert str(SQLiteStorage.get_project_db_path(projects[0])).startswith(str(local_only))
