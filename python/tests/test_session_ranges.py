"""Numbers handed to eerl.Session are range-checked before they reach ctypes, whose integer
fields would wrap them silently (issue 19: pools=[2**32 + 1] ran on GPU 1, governor_peak_mhz=-1
became 4294967295). Each refusal names the argument and the value."""

import pytest

import eerl

POOLS = {"generation": [0, 1], "training": [0, 1]}


@pytest.mark.parametrize("gpu, text", [
    (2 ** 32 + 1, "4294967297 is out of range"),
    (2 ** 64, "is out of range"),
    (1.5, "must be an integer, not 1.5"),
    (True, "must be an integer, not True"),
    ("1", "must be an integer, not '1'"),
])
def test_gpu_index_out_of_range(node, gpu, text):
    with pytest.raises(ValueError, match=text) as e:
        eerl.Session(pools={"generation": [gpu], "training": [gpu]}, observe_only=True)
    assert "pools['generation']" in str(e.value)
    assert eerl.live_sessions() == []


@pytest.mark.parametrize("kw, value, text", [
    ("governor_peak_mhz", -1, "governor_peak_mhz = -1 is out of range: it must be 0-4294967295"),
    ("governor_peak_mhz", 2 ** 32, "governor_peak_mhz = 4294967296 is out of range"),
    ("meter_interval_ms", -5, "meter_interval_ms = -5 is out of range"),
    ("meter_interval_ms", 2 ** 40, "meter_interval_ms = 1099511627776 is out of range"),
    ("governor_peak_mhz", 1980.5, "governor_peak_mhz must be an integer, not 1980.5"),
])
def test_config_numbers_out_of_range(node, kw, value, text):
    with pytest.raises(ValueError, match=text):
        eerl.Session(pools=POOLS, observe_only=True, **{kw: value})
    assert eerl.live_sessions() == []


def test_in_range_numbers_are_taken(node):
    with eerl.Session(pools=POOLS, observe_only=True, governor_peak_mhz=1980.0,
                      meter_interval_ms=50) as s:
        assert s.pools == POOLS


@pytest.mark.parametrize("kw, value, text", [
    ("update", -1, "update = -1 is out of range: it must be 0-18446744073709551615"),
    ("update", 2 ** 64, "update = 18446744073709551616 is out of range"),
    ("policy_version", -2, "policy_version = -2 is out of range"),
    ("policy_version", 2 ** 63, "policy_version = 9223372036854775808 is out of range"),
])
def test_update_numbers_out_of_range(node, kw, value, text):
    with eerl.Session(pools=POOLS, observe_only=True) as s:
        with s.phase("generation"):
            pass
        with pytest.raises(ValueError, match=text):
            s.update_end(generated_tokens=1000, valid_tokens=900, longest_response=100,
                         **{kw: value})
        assert s.status()["observed"] == 0  # nothing reached the controller
