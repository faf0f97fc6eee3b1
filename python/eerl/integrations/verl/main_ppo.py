"""verl's main_ppo with eerl on, in one line (docs/integrations/verl.md):

    python -m eerl.integrations.verl.main_ppo <verl's Hydra overrides> [+eerl.trace=run.jsonl ...]

in place of `python -m verl.trainer.main_ppo` with the same overrides: the v1 trainers
(trainer.v1.trainer_mode=sync, colocate_async, separate_async) and the legacy one
(trainer.use_v1=False). eerl's options are +eerl.KEY=VALUE: eerl.Session's keywords (trace,
observe_only, allowed_loss, strategy, run_info, governor_peak_mhz, meter_interval_ms, eerld,
resume_from, resume_tag) and the hook's (strict, phases, log_metrics, pools). The mode comes
from the trainer verl runs, the pools from where verl placed its workers (eerl.integrations.
verl._job says how).
"""

from ._job import main as _main


def main(argv=None):
    """Runs verl.trainer.main_ppo's main with eerl on; argv: the overrides (default: the
    command line's)."""
    return _main("verl.trainer.main_ppo", argv)


if __name__ == "__main__":
    main()
