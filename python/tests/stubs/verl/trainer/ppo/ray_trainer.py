"""Stand-in of verl.trainer.ppo.ray_trainer: the names fit() uses, imported the way verl imports
them, and a fit() with the same timers, nesting and call order as RayPPOTrainer.fit (GRPO, no
critic, reference policy on). Stage bodies sleep for a given time instead of computing."""
import time

import torch

from verl.trainer.ppo.metric_utils import compute_data_metrics
from verl.utils.debug import marked_timer


class DataProto:
    def __init__(self, batch):
        self.batch = batch


class RayPPOTrainer:
    def __init__(self, batches, stage_s=0.01, logger=None, use_reference_policy=True):
        self.batches = batches  # list of response masks, one per step
        self.stage_s = stage_s
        self.logged = [] if logger is None else logger
        self.use_reference_policy = use_reference_policy
        self.global_steps = 0

    def _work(self, k=1.0):
        time.sleep(self.stage_s * k)

    def fit(self):
        self.global_steps = 1
        for mask in self.batches:
            metrics, timing_raw = {}, {}
            with marked_timer("start_profile", timing_raw):
                pass
            with marked_timer("step", timing_raw):
                with marked_timer("gen", timing_raw, color="red"):
                    self._work(2)
                batch = DataProto({"response_mask": mask})
                with marked_timer("reward", timing_raw, color="yellow"):
                    self._work(0.2)
                with marked_timer("old_log_prob", timing_raw, color="blue"):
                    self._work(0.5)
                if self.use_reference_policy:
                    with marked_timer("ref", timing_raw, color="olive"):
                        self._work(0.5)
                with marked_timer("adv", timing_raw, color="brown"):
                    self._work(0.1)
                with marked_timer("update_actor", timing_raw, color="red"):
                    self._work(1.5)
                with marked_timer("update_weights", timing_raw, color="red"):
                    self._work(0.3)
            with marked_timer("stop_profile", timing_raw):
                pass
            metrics.update(compute_data_metrics(batch=batch, use_critic=False))
            self.logged.append((dict(metrics), dict(timing_raw), self.global_steps))
            self.global_steps += 1


def response_mask(lengths, width=None):
    width = width or max(lengths)
    m = torch.zeros(len(lengths), width, dtype=torch.long)
    for i, n in enumerate(lengths):
        m[i, :n] = 1
    return m
