"""What docs/python.md tells a user to install is what the tests pin: the CPU build of the torch
release in python/requirements/test.in, from PyTorch's index of CPU wheels, for the example and
for the test lock."""

import os
import re

from conftest import REPO


def _read(*path):
    with open(os.path.join(REPO, *path)) as f:
        return f.read()


def test_docs_say_how_to_get_the_pinned_torch_as_a_cpu_build():
    pinned = re.search(r"^torch==(\S+)", _read("python", "requirements", "test.in"), re.M)
    assert pinned, "python/requirements/test.in pins no torch"
    doc = _read("docs", "python.md")
    cpu = "https://download.pytorch.org/whl/cpu"
    assert "pip install torch==%s --index-url %s" % (pinned.group(1), cpu) in doc
    assert ("pip install -r python/requirements/test.lock --extra-index-url %s" % cpu) in doc
    assert re.search(r"^torch==%s$" % re.escape(pinned.group(1)),
                     _read("python", "requirements", "test.lock"), re.M)
