"""Stand-in of the driver side of nemo_rl.algorithms.grpo (eerl's, tests only): the order of the
Timer's labels and of the Logger.log_metrics calls in grpo_train and async_grpo_train, as at the
revision nemo_rl._standin.select() chose. Stage bodies sleep instead of computing; the GPU work
of NeMo-RL's Ray workers (and async GRPO's trajectory collector) is not here at all.

Read in nemo_rl/algorithms/grpo.py at tag v0.7.0 (the file last changed in b4bd1c7, 2026-07-01)
and on main at 7ea279a (last changed in 8863ebe, 2026-08-21). What each reproduces:

grpo_train, one step (the same labels in both revisions; main's Timer has context
{"worker": "driver"}, v0.7.0's none):
    total_step_time
      data_processing
      prepare_for_generation/total
        prepare_for_generation/transfer_and_update_weights   (only when the weights are stale:
                                                              every step, the first included)
      generation            -> log_metrics(rollout metrics, prefix="train")
      reward_calculation    (> dynamic_sampling when DAPO's dynamic sampling is on)
      data_processing
      logprob_inference_prep
      policy_and_reference_logprobs
      advantage_calculation
      training_prep
      policy_training
    log_metrics(train metrics with the rollout metrics merged in, prefix="train")
    log_metrics(..., prefix="performance")
    log_metrics(timer.get_timing_metrics("sum"), prefix="timing/train", step_finished=True)
  A dynamic-sampling round that did not fill the batch ends after reward_calculation >
  dynamic_sampling and the next round begins a new total_step_time, with no log of the step.

async_grpo_train, one step:
    v0.7.0                                 main
    -                                      init/total (once, the first buffer fill)
    total_step_time                        total_step_time
      exposed_generation                     exposed_generation (> idle/buffer_starvation, then
                                                                 a new total_step_time, when the
                                                                 buffer is short)
      reward_calculation                     reward_calculation
      data_processing > overlong_filter      data_processing > overlong_filter, mask_sample_filter
      -                                      exposed_generation (colocated: the engine pauses)
      logprob_inference_prep                 logprob_inference_prep
      policy_and_reference_logprobs          policy_and_reference_logprobs
      advantage_calculation                  advantage_calculation
      training_prep                          training_prep
      policy_training                        policy_training
      exposed_generation                     idle/refit_bubble
      weight_sync                              exposed_generation
                                               weight_sync
    log_metrics: performance, train,       log_metrics: performance, train, "" (efficiency),
                 timing/train                           timing/train
  The train metrics hold global_valid_toks, the consumed groups' rollout metrics and
  avg_trajectory_age. v0.7.0 refuses colocated generation in async GRPO (an assertion); main
  allows it with Megatron generation.

steps: a list of (lengths, valid_tokens) or (lengths, valid_tokens, avg_trajectory_age); lengths
is the generated length of each response, or (sync) a list of such lists, one per dynamic-sampling
round. max_key: the rollout metric that holds the longest response ("max_gen_tokens_per_sample"
from NeMo-RL's own rollouts, "gen_tokens_per_sample/max" from NeMo-Gym's) or None.
"""

import time

from nemo_rl import _standin
from nemo_rl.utils.timer import Timer


def _main():
    return _standin.REVISION == "main"


def _driver_timer():
    return Timer(context={"worker": "driver"}) if _main() else Timer()


def _rollout_metrics(lengths, max_key):
    m = {"total_turns": len(lengths),
         "mean_gen_tokens_per_sample": sum(lengths) / len(lengths),
         "gen_tokens_per_sample/mean": sum(lengths) / len(lengths),
         "mean_total_tokens_per_sample": sum(lengths) / len(lengths) + 10}
    if max_key is not None:
        m[max_key] = max(lengths)
    return m


def _unpack(step):
    lengths, valid = step[0], step[1]
    age = step[2] if len(step) > 2 else None
    rounds = lengths if lengths and isinstance(lengths[0], (list, tuple)) else [lengths]
    return rounds, valid, age


def _end_of_step(logger, timer, step, metrics, async_=False):
    timing = timer.get_timing_metrics(reduction_op="sum")
    total = timing.get("total_step_time", 0) or 1e-9
    timing["valid_tokens_per_sec_per_gpu"] = metrics["global_valid_toks"] / total
    perf = {"tokens_per_sec": metrics["global_valid_toks"] / total}
    if async_:
        logger.log_metrics(perf, step, prefix="performance")
        logger.log_metrics(metrics, step, prefix="train")
        if _main():
            logger.log_metrics({"efficiency/idle_fraction": 0.0}, step, prefix="")
    else:
        logger.log_metrics(metrics, step, prefix="train")
        logger.log_metrics(perf, step, prefix="performance")
    logger.log_metrics(timing, step, prefix="timing/train", step_finished=True)
    timer.reset()


def grpo_train(steps, logger, stage_s=0.001, max_key="max_gen_tokens_per_sample"):
    timer = _driver_timer()
    stale = True  # v0.7.0: POLICY_GENERATION_STALE = True; main: no weight synchronizer -> stale
    for total_steps, step in enumerate(steps):
        rounds, valid, _ = _unpack(step)
        for r, lengths in enumerate(rounds):
            last = r == len(rounds) - 1
            with timer.time("total_step_time"):
                with timer.time("data_processing"):
                    pass
                with timer.time("prepare_for_generation/total"):
                    if stale:
                        with timer.time("prepare_for_generation/transfer_and_update_weights"):
                            time.sleep(stage_s * 0.3)
                        stale = False
                with timer.time("generation"):
                    time.sleep(stage_s * 2)
                    rollout_metrics = _rollout_metrics(lengths, max_key)
                    logger.log_metrics(rollout_metrics, total_steps + 1, prefix="train")
                with timer.time("reward_calculation"):
                    time.sleep(stage_s * 0.1)
                    if len(rounds) > 1:
                        with timer.time("dynamic_sampling"):
                            pass
                if not last:
                    continue  # the batch is not full yet: generate again
                with timer.time("data_processing"):
                    pass
                with timer.time("logprob_inference_prep"):
                    pass
                with timer.time("policy_and_reference_logprobs"):
                    time.sleep(stage_s * 0.5)
                with timer.time("advantage_calculation"):
                    pass
                with timer.time("training_prep"):
                    stale = True
                with timer.time("policy_training"):
                    time.sleep(stage_s * 1.5)
            metrics = {"loss": 0.1, "global_valid_seqs": len(lengths),
                       "global_valid_toks": valid, **rollout_metrics}
            _end_of_step(logger, timer, total_steps + 1, metrics)


def async_grpo_train(steps, logger, colocated=False, stage_s=0.001,
                     max_key="max_gen_tokens_per_sample", starve_before=()):
    """starve_before: step indices (0-based) before which the buffer is short once (main: an
    iteration of exposed_generation > idle/buffer_starvation that ends no step)."""
    if colocated and not _main():
        raise AssertionError("Colocated inference is not supported for async GRPO. Please use "
                             "non-colocated inference.")
    timer = _driver_timer()
    if _main():
        timer.start("init/total")  # waiting for the first buffer fill
        time.sleep(stage_s)
        timer.stop("init/total")
    for step, item in enumerate(steps):
        rounds, valid, age = _unpack(item)
        lengths = rounds[-1]
        if _main() and step in starve_before:
            with timer.time("total_step_time"):
                with timer.time("exposed_generation"):
                    with timer.time("idle/buffer_starvation"):
                        time.sleep(stage_s)
        with timer.time("total_step_time"):
            with timer.time("exposed_generation"):
                rollout_metrics = _rollout_metrics(lengths, max_key)
            with timer.time("reward_calculation"):
                pass
            with timer.time("data_processing"):
                with timer.time("overlong_filter"):
                    pass
                if _main():
                    with timer.time("mask_sample_filter"):
                        pass
            if colocated:  # policy_generation.blocks_training(): pause the engine and collector
                with timer.time("exposed_generation"):
                    time.sleep(stage_s * 0.2)
            with timer.time("logprob_inference_prep"):
                pass
            with timer.time("policy_and_reference_logprobs"):
                time.sleep(stage_s * 0.5)
            with timer.time("advantage_calculation"):
                pass
            with timer.time("training_prep"):
                pass
            with timer.time("policy_training"):
                time.sleep(stage_s * 1.5)
            if _main():
                timer.start("idle/refit_bubble")
            with timer.time("exposed_generation"):  # prepare_for_refit: pending generations
                time.sleep(stage_s * 0.2)
            with timer.time("weight_sync"):
                time.sleep(stage_s * 0.3)
            if _main():
                timer.stop("idle/refit_bubble")
        metrics = {"loss": 0.1, "global_valid_seqs": len(lengths), "global_valid_toks": valid,
                   **rollout_metrics}
        if age is not None:
            metrics["avg_trajectory_age"] = age
        _end_of_step(logger, timer, step + 1, metrics, async_=True)
