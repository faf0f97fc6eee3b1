"""Stand-in of nemo_rl.utils.logger.Logger (eerl's, tests only): log_metrics with the signature
it has at v0.7.0 (the file last changed in 737f20a, 2026-06-23) and on main at 7ea279a (last
changed in 3ee5fa3, 2026-07-24), the same in both:
    log_metrics(self, metrics, step, prefix="", step_metric=None, step_finished=False)
The real one forwards to the enabled backends (wandb, tensorboard, ...); this one records."""


class Logger:
    def __init__(self, cfg=None):
        self.logged = []  # (prefix, step, metrics)

    def log_metrics(self, metrics, step, prefix="", step_metric=None, step_finished=False):
        self.logged.append((prefix, step, dict(metrics)))
