"""Stand-in of the order of events in nemo_rl.algorithms.grpo.grpo_train for one GRPO step:
the driver Timer's labels and nesting, and the two Logger.log_metrics calls with prefix "train"
(rollout metrics after generation, the step's training metrics with global_valid_toks at the
end). steps: list of (gen_lengths, valid_tokens). Stage bodies sleep instead of computing."""
import time

from nemo_rl.utils.timer import Timer


def grpo_train(steps, logger, stage_s=0.01, rollout_has_max=True, need_refit=True):
    timer = Timer(context={"worker": "driver"})
    stale = False  # the first generation runs on the initial weights
    for total_steps, (lengths, valid) in enumerate(steps):
        with timer.time("total_step_time"):
            with timer.time("data_processing"):
                pass
            with timer.time("prepare_for_generation/total"):
                if need_refit and stale:
                    with timer.time("prepare_for_generation/transfer_and_update_weights"):
                        time.sleep(stage_s * 0.3)
                    stale = False
            with timer.time("generation"):
                time.sleep(stage_s * 2)
                rollout_metrics = {
                    "total_turns": len(lengths),
                    "mean_gen_tokens_per_sample": sum(lengths) / len(lengths),
                    "mean_total_tokens_per_sample": sum(lengths) / len(lengths) + 10,
                }
                if rollout_has_max:
                    rollout_metrics["max_gen_tokens_per_sample"] = max(lengths)
                logger.log_metrics(rollout_metrics, total_steps + 1, prefix="train")
            with timer.time("reward_calculation"):
                time.sleep(stage_s * 0.1)
            with timer.time("logprob_inference_prep"):
                pass
            with timer.time("policy_and_reference_logprobs"):
                time.sleep(stage_s * 0.5)
            with timer.time("training_prep"):
                pass
            with timer.time("policy_training"):
                time.sleep(stage_s * 1.5)
                stale = True
        metrics = {"loss": 0.1, "global_valid_seqs": len(lengths), "global_valid_toks": valid,
                   "total_num_tokens": sum(lengths) + 10 * len(lengths)}
        logger.log_metrics(metrics, total_steps + 1, prefix="train")
        logger.log_metrics({"total_step_time": 1.0}, total_steps + 1, prefix="timing/train")
        timer.reset()
