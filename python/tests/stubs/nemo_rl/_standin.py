"""Which NeMo-RL revision the stand-in reproduces (this module is the stand-in's own: NeMo-RL has
no nemo_rl._standin).

NeMo-RL cannot be installed on the build machine, so python/tests/stubs/nemo_rl is eerl's own
stand-in of the few interfaces eerl.integrations.nemo_rl hooks. It reproduces two revisions of
NVIDIA-NeMo/RL, read at the commits below; select() picks the one the next run behaves as:

  "v0.7.0"  the newest release: tag v0.7.0, commit 81aa43dda4765b0429cf31dab44441e4e4383911
            (2026-07-29; branched from main at 2206ae1, 2026-06-27). Its Timer logs nothing.
  "main"    main at commit 7ea279abfbeb698b092856d0dab61e7cf39bc909 (2026-08-22), the newest
            snapshot read. Its Timer logs a DEBUG line at every start and stop (since 1687d23,
            2026-07-08) and colocated async GRPO exists (since 8863ebe, 2026-08-21).

What differs between the two, per interface, is listed in README.md beside this file.
"""

import sys

REVISIONS = {
    "v0.7.0": {
        "commit": "81aa43dda4765b0429cf31dab44441e4e4383911",
        "date": "2026-07-29",
        "version": "0.7.0",  # nemo_rl/package_info.py at the tag
    },
    "main": {
        "commit": "7ea279abfbeb698b092856d0dab61e7cf39bc909",
        "date": "2026-08-22",
        # package_info.py on main still says 0.6.0; a git checkout appends "+<short hash>".
        "version": "0.6.0+7ea279a",
    },
}

REVISION = "main"


def select(revision):
    """Makes the stand-in behave as revision ("v0.7.0" or "main") from now on: nemo_rl.__version__,
    nemo_rl.utils.timer.Timer and the name Timer that nemo_rl.algorithms.grpo imported from it
    (NeMo-RL's own modules import the class by name, so a hook has to patch the class, not the
    module attribute)."""
    global REVISION
    if revision not in REVISIONS:
        raise ValueError("no stand-in for NeMo-RL revision %r (have %s)"
                         % (revision, ", ".join(REVISIONS)))
    from nemo_rl.utils import timer
    from nemo_rl.algorithms import grpo

    REVISION = revision
    cls = timer.MainTimer if revision == "main" else timer.ReleaseTimer
    timer.Timer = cls
    grpo.Timer = cls
    sys.modules["nemo_rl"].__version__ = REVISIONS[revision]["version"]
    return revision
