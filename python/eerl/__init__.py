"""eerl: energy-efficient GPU clocks for RL post-training of LLMs (Python binding of libeerl).

    import eerl
    s = eerl.Session(mode="colocated", pools={"generation": [0, 1], "training": [0, 1]},
                     allowed_loss=0.02, observe_only=False, trace="run.jsonl")
    with s.phase("generation"): ...
    with s.phase("training"): ...
    u = s.update_end(generated_tokens=G, valid_tokens=N, longest_response=L, policy_version=v)
    u.energy_per_valid_token_j, s.status().state, s.applied_setting().gen_mhz
    s.metrics()   # the flat "eerl/..." dict for loggers
    s.close()

docs/python.md in the eerl repository has the whole story.
"""

from ._lib import (EerlError, LibraryNotFound, VersionMismatch, __version__, library_path,
                   library_version)
from .api import SessionLike, Setting, Status, Update
from .session import Session, close_all, live_sessions

__all__ = ["Session", "SessionLike", "Setting", "Status", "Update", "EerlError",
           "LibraryNotFound", "VersionMismatch", "library_path", "library_version",
           "live_sessions", "close_all", "__version__"]
