"""Stand-in of nemo_rl.utils.logger.Logger: log_metrics with the real signature, recording."""


class Logger:
    def __init__(self, cfg=None):
        self.logged = []

    def log_metrics(self, metrics, step, prefix="", step_metric=None, step_finished=False):
        self.logged.append((prefix, step, dict(metrics)))
