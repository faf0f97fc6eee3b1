"""The fail-loudly rules every integration shares (eerl.integrations._common): install refuses a
framework with nothing to hook; an update with no hooked phase raises (strict) or warns once."""

import warnings

import pytest

from conftest import RecordingSession

from eerl.integrations._common import Framework, IntegrationError, PhaseDriver, version_of


def test_require_names_the_framework_its_version_and_what_is_missing():
    fw = Framework("Acme", version="9.9", tested="1.0", doc="docs/integrations/acme.md")
    fw.require({"acme.timer": True})
    with pytest.raises(IntegrationError) as e:
        fw.require({"acme.timer": True, "acme.Trainer.step": False})
    msg = str(e.value)
    assert "Acme 9.9 has no acme.Trainer.step" in msg and "tested against Acme 1.0" in msg
    assert e.value.framework == "Acme" and e.value.version == "9.9"
    assert e.value.missing == ["acme.Trainer.step"]
    fw.require({"a": False, "b": True}, any_of=True)
    with pytest.raises(IntegrationError, match="has no a, b"):
        fw.require({"a": False, "b": False}, any_of=True)


def test_version_of_reads_the_installed_distribution():
    assert version_of("pytest") == pytest.__version__
    assert version_of("no-such-distribution-eerl") == "(version unknown)"


def test_an_update_without_phases_warns_once_and_is_still_recorded_once_a_phase_began():
    s = RecordingSession()
    d = PhaseDriver(s, framework=Framework("Acme", version="9.9", hooks="Acme's step timers"))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        d.enter("acme.renamed_gen", None)
        d.exit("acme.renamed_gen")
        d.update_end(generated_tokens=4, valid_tokens=4, longest_response=2)
        d.update_end(generated_tokens=4, valid_tokens=4, longest_response=2)
        d.enter("gen", "generation")
        d.exit("gen")
        d.update_end(generated_tokens=4, valid_tokens=4, longest_response=2)
    msgs = [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)]
    assert len(msgs) == 1, msgs
    assert "update 1 ended with no phase seen: none of Acme's step timers ran" in msgs[0]
    assert "in Acme 9.9" in msgs[0]
    assert "acme.renamed_gen" in msgs[0]
    # the first two: no phase had begun, so the runtime had nothing to record (the warning says
    # so, not the runtime's EERL_ESTATE); the third is recorded
    assert "The update was not recorded" in msgs[0] and "before any phase began" in msgs[0]
    assert not any("EERL_ESTATE" in m or "invalid state" in m for m in msgs[1:])
    assert len(s.updates) == 1 and d.blind_updates == 2
    with warnings.catch_warnings(record=True) as w:  # once a phase has begun: recorded
        warnings.simplefilter("always")
        d.update_end(generated_tokens=4, valid_tokens=4, longest_response=2)
    assert len(s.updates) == 2 and d.blind_updates == 3


def test_strict_raises_after_recording_and_expect_names_the_missing_phase():
    s = RecordingSession()
    d = PhaseDriver(s, strict=True, framework=Framework("Acme", version="9.9"),
                    expect=("generation",))
    d.enter("train", "training")
    d.exit("train")
    with pytest.raises(IntegrationError, match="no generation phase seen") as e:
        d.update_end(generated_tokens=4, valid_tokens=4, longest_response=2)
    assert e.value.missing == ["generation"]
    assert len(s.updates) == 1  # recorded before the check raised
    d.set_base("training")  # a base phase is not a hooked phase
    with pytest.raises(IntegrationError, match="no phase seen"):
        d.update_end(generated_tokens=4, valid_tokens=4, longest_response=2)
    assert s.phases() == ["training", "|", "training", "|"]


def test_strict_first_update_without_a_phase_names_what_it_saw_not_the_runtime_refusal(node):
    """On the real runtime: the session refuses an update in which no phase ever began
    (EERL_ESTATE); the driver's check comes first, so a strict hook raises IntegrationError naming
    the framework and the timers it saw, and says the update was not recorded."""
    from conftest import have_runtime
    if not have_runtime():
        pytest.skip("libeerl not built")
    import eerl
    from eerl import EerlError
    s = eerl.Session(mode="colocated", pools={"generation": [0], "training": [0]},
                     observe_only=True, install_sigterm=False)
    try:
        d = PhaseDriver(s, strict=True, framework=Framework("Acme", version="9.9",
                                                            hooks="Acme's step timers"))
        d.enter("acme.renamed_gen", None)
        d.exit("acme.renamed_gen")
        with pytest.raises(IntegrationError) as e:
            d.update_end(generated_tokens=4, valid_tokens=4, longest_response=2)
        msg = str(e.value)
        assert not isinstance(e.value, EerlError)
        assert "update 1 ended with no phase seen" in msg and "Acme 9.9" in msg
        assert "acme.renamed_gen" in msg and "The update was not recorded" in msg
        assert d.blind_updates == 1
        # the next update has its phase: recorded, no finding
        d.enter("gen", "generation")
        d.exit("gen")
        assert d.update_end(generated_tokens=4, valid_tokens=4, longest_response=2) is not None
        # a phase has begun in the session: an update without one is recorded, then raises
        with pytest.raises(IntegrationError, match="no phase seen") as e:
            d.update_end(generated_tokens=4, valid_tokens=4, longest_response=2)
        assert "not recorded" not in str(e.value)
        assert s.metrics()["eerl/update"] == 2
    finally:
        s.close()


class _FullDiskSession(RecordingSession):
    """A session whose trace sits on a full disk, as MultiNodeSession's does: update_end raises
    the OSError of the write (after recording the update)."""

    def update_end(self, **kwargs):
        RecordingSession.update_end(self, **kwargs)
        raise OSError(28, "No space left on device")


def test_an_oserror_from_the_session_warns_once_unless_strict():
    s = _FullDiskSession()
    d = PhaseDriver(s)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):  # the training loop goes on
            d.enter("gen", "generation")
            d.exit("gen")
            assert d.update_end(generated_tokens=4, valid_tokens=4, longest_response=2) is None
    msgs = [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)]
    assert len(msgs) == 1 and "No space left on device" in msgs[0], msgs
    assert len(s.updates) == 3 and d.errors == 3
    d = PhaseDriver(_FullDiskSession(), strict=True)
    d.enter("gen", "generation")
    d.exit("gen")
    with pytest.raises(OSError, match="No space left"):
        d.update_end(generated_tokens=4, valid_tokens=4, longest_response=2)
