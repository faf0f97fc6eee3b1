"""Stand-in of verl.trainer.ppo.metric_utils.compute_data_metrics (lengths only)."""


def compute_data_metrics(batch, use_critic=True):
    mask = batch.batch["response_mask"]
    lengths = mask.sum(-1).float()
    return {"response_length/mean": float(lengths.mean()),
            "response_length/max": float(lengths.max())}
