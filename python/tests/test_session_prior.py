"""Session(prior=...) on the stand-in NVML node: what the binding says about a prior from earlier
jobs, the key the job's model joins, and the errors. Whether a matching prior is verified and
locks early is decided on the twin, in virtual time (tests/test_sim_prior.sh)."""

import json

import pytest

import eerl
from test_session import POOLS, one_update

# The stand-in's updates are too short for the work to explain their time; that is not tested here.
pytestmark = pytest.mark.filterwarnings("ignore:eerl. the governor predictor leaves:RuntimeWarning")


def saved_state(tmp_path, name, job_model=None, updates=11):
    """A job of `updates` updates that saves its state into tmp_path/name/ (its checkpoint)."""
    ckpt = tmp_path / name
    ckpt.mkdir()
    with eerl.Session(mode="colocated", pools=POOLS, job_model=job_model) as s:
        for u in range(updates):
            one_update(s, u)
        s.save_state(ckpt)
    return ckpt


def test_no_prior_says_nothing(node):
    with eerl.Session(mode="colocated", pools=POOLS) as s:
        assert not s.prior_taken and s.prior_detail == ""


def test_a_prior_without_a_lock_is_not_taken_and_says_why(node, tmp_path):
    """The earlier job never locked (11 updates: calibration and one more): its state
    matches the key but has no setting to verify, so the job searches and says why, in
    prior_detail and in the first update's events."""
    (tmp_path / "jobs").mkdir()
    saved_state(tmp_path / "jobs", "job1")
    prior = tmp_path / "jobs"
    trace = str(tmp_path / "run.jsonl")
    with eerl.Session(mode="colocated", pools=POOLS, prior=prior, trace=trace) as s:
        assert not s.prior_taken
        assert "never locked" in s.prior_detail and "fresh search" in s.prior_detail
        assert str(prior) in s.prior_detail
        assert one_update(s, 0)["eerl/state"] == "calibrating"
    first = [json.loads(l) for l in open(trace) if '"update"' in l][0]
    assert any(e["reason"].startswith("prior: none of") and "never locked" in e["reason"]
               for e in first["events"])


def test_the_jobs_model_is_part_of_the_key(node, tmp_path):
    ckpt = saved_state(tmp_path, "ckpt", job_model="model-a")
    with eerl.Session(mode="colocated", pools=POOLS, job_model="model-b",
                      resume_from=ckpt) as s:
        assert not s.resumed
        assert "model-a" in s.resume_detail and "model-b" in s.resume_detail
    with eerl.Session(mode="colocated", pools=POOLS, job_model="model-a",
                      resume_from=ckpt) as s:
        assert s.resumed, s.resume_detail


def test_bad_priors_are_errors_naming_the_path(node, tmp_path):
    missing = tmp_path / "no-such-dir"
    with pytest.raises(eerl.EerlError, match=str(missing)):
        eerl.Session(mode="colocated", pools=POOLS, prior=missing)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "job1.state").write_bytes(b"not a saved state at all")
    with pytest.raises(eerl.EerlError, match="job1.state"):
        eerl.Session(mode="colocated", pools=POOLS, prior=bad)


def test_prior_and_resume_together_are_refused(node, tmp_path):
    ckpt = saved_state(tmp_path, "ckpt")
    with pytest.raises(eerl.EerlError, match="not both"):
        eerl.Session(mode="colocated", pools=POOLS, prior=ckpt, resume_from=ckpt)
