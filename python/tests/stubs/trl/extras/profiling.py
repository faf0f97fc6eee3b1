"""Stand-in of trl.extras.profiling: ProfilingContext (name, report_to, is_main_process, step,
metric_prefix) timing its block, profiling_context(trainer, name) naming it
"<TrainerClass>.<name>", and profiling_decorator naming it after the method. No reporting."""
import functools
import time


class ProfilingContext:
    def __init__(self, name, report_to, is_main_process=True, step=None,
                 metric_prefix="profiling/Time taken"):
        self.name = name
        self.report_to = report_to
        self.is_main_process = is_main_process
        self.step = step
        self.metric_prefix = metric_prefix
        self._start_time = None

    def __enter__(self):
        self._start_time = time.perf_counter()
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        return False


def profiling_context(trainer, name):
    return ProfilingContext(name=f"{trainer.__class__.__name__}.{name}",
                            report_to=trainer.args.report_to,
                            is_main_process=trainer.accelerator.is_main_process,
                            step=trainer.state.global_step)


def profiling_decorator(func):
    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        with profiling_context(self, func.__name__):
            return func(self, *args, **kwargs)
    return wrapper
