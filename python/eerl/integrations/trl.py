"""eerl for TRL's GRPOTrainer and AsyncGRPOTrainer, without a fork (docs/integrations/trl.md).

One line, in every process of the job (_trl_callback.py does the rest):

    from eerl.integrations.trl import EerlCallback
    trainer = GRPOTrainer(..., callbacks=[EerlCallback(trace="eerl-run.jsonl")])

The explicit form, for those who place the session themselves:

    import eerl
    from eerl.integrations import trl as eerl_trl
    trainer = GRPOTrainer(...)
    session = None
    if trainer.accelerator.is_main_process:         # one controller per job: global rank 0
        session = eerl.Session(mode="colocated", pools={"generation": [0], "training": [0]},
                               trace="eerl-run.jsonl")
    hook = eerl_trl.install(session, trainer)       # every process; a no-op where session is None
    trainer.train()
    hook.uninstall()
    if session is not None:
        session.close()

The hooks and what they hook: GRPOTrainer's in _trl_hook.py, AsyncGRPOTrainer's (mode
"inflight") in _trl_async.py. install() refuses a TRL without those hook points, a session in a
process other than the main one, and no session in the main one. This module is the public face
only: it imports the others, none imports it.
"""

from . import _trl_callback
from ._common import IntegrationError
from ._trl_hook import (CONTAINERS, DOC, PHASES, TESTED, TRLHook, check,  # noqa: F401
                        framework, is_async)
from ._trl_hook import make_hook


class _Inert:
    """What install(None, trainer) returns in the processes without the session."""
    updates = generations = eval_generations = 0

    def metrics(self):
        return {}

    def uninstall(self):
        pass


def install(session, trainer, phases=None, strict=False, profiling_module=None):
    """Hooks trainer (a TRL GRPOTrainer or AsyncGRPOTrainer) and TRL's profiling for session.
    The one-line form, EerlCallback, does this and the rest by itself.

    session: the job's one eerl session (eerl.Session, or eerl.multinode.MultiNodeSession across
        nodes), in TRL's main process (trainer.accelerator.is_main_process); None in every other
        process, where install does nothing (None in the main process is refused: ValueError).
        An AsyncGRPOTrainer's session runs mode "inflight", its generation pool the vLLM
        server's GPUs. phases: overrides of the block-name -> eerl phase table (a value of None
        drops a name; GRPOTrainer only). strict: let eerl errors and a missing generation phase
        stop the run. Raises IntegrationError when this TRL lacks a hook point."""
    fw = framework()
    acc = getattr(trainer, "accelerator", None)
    main = getattr(acc, "is_main_process", True) if acc is not None else True
    if session is None:
        if main:
            raise ValueError("eerl: install(None, trainer) in TRL's main process: the main process "
                             "holds the job's session (%s); only the other processes pass None"
                             % DOC)
        return _Inert()
    profiling_module = check(trainer, fw, profiling_module)
    if not main:
        raise IntegrationError(
            "eerl: the session must live in TRL's main process (trainer.accelerator."
            "is_main_process, global rank 0): one controller per job, and only that process "
            "enters vLLM server-mode generation. This is process %s of %s; pass session=None "
            "here (%s)." % (getattr(acc, "process_index", "?"), getattr(acc, "num_processes", "?"),
                            DOC), fw.name, fw.version, ["the main process"])
    return make_hook(session, trainer, phases, strict, profiling_module, fw, callback=True)


def __getattr__(name):
    # EerlCallback subclasses transformers.TrainerCallback: made on first use, so that importing
    # this module needs no transformers.
    if name == "EerlCallback":
        cls = globals()["EerlCallback"] = _trl_callback.callback_class()
        return cls
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
