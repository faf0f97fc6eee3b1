"""Stand-in of trl.trainer.grpo_trainer.GRPOTrainer: the profiled blocks and their nesting as
in TRL's GRPOTrainer (_prepare_inputs > [_move_model_to_vllm], vLLM.generate or
transformers.generate, _get_per_token_logps for old/ref; compute_loss > _get_per_token_logps),
one generation per optimizer step (generate_every = gradient_accumulation_steps micro-batches,
each micro-batch consuming its slice), and _generate_and_score_completions returning
completion_ids / completion_mask. Model work is a sleep. completions: one list of lengths per
generation; max_completion_length truncates."""
import time

import torch

from transformers import Trainer, TrainingArguments
from trl.extras.profiling import profiling_context, profiling_decorator

PAD, EOS = 0, 2


class Tokenizer:
    pad_token_id = PAD
    eos_token_id = EOS


class GRPOTrainer(Trainer):
    def __init__(self, completions, args=None, use_vllm=True, beta=0.04, num_iterations=1,
                 max_completion_length=16, stage_s=0.001, callbacks=None):
        super().__init__(args or TrainingArguments())
        self.processing_class = Tokenizer()
        self.completions = list(completions)
        self.use_vllm = use_vllm
        self.beta = beta
        self.num_iterations = num_iterations
        self.max_completion_length = max_completion_length
        self.stage_s = stage_s
        self._step = 0
        self._buffered = None
        self._last_loaded_step = -1
        for cb in callbacks or []:
            self.add_callback(cb)

    def _work(self, k=1.0):
        time.sleep(self.stage_s * k)

    @profiling_decorator
    def _get_per_token_logps(self, model, ids):
        self._work(0.5)
        return torch.zeros(ids.shape)

    @profiling_decorator
    def _move_model_to_vllm(self):
        self._work(0.3)

    @profiling_decorator
    def _prepare_inputs(self, inputs):
        ga = self.args.gradient_accumulation_steps
        if self._step % ga == 0 or self._buffered is None:
            self._buffered = self._generate_and_score_completions(inputs)
        self._step += 1
        return self._buffered

    def _generate_and_score_completions(self, inputs):
        lengths = self.completions.pop(0)
        if self.use_vllm:
            if self.state.global_step != self._last_loaded_step:
                self._move_model_to_vllm()
                self._last_loaded_step = self.state.global_step
            with profiling_context(self, "vLLM.generate"):
                self._work(2)
        else:
            with profiling_context(self, "transformers.generate"):
                self._work(2)
        width = self.max_completion_length
        ids = torch.full((len(lengths), width), PAD, dtype=torch.long)
        for i, n in enumerate(lengths):  # n tokens then EOS; cut at the limit
            k = min(n, width)
            ids[i, :k] = 5
            if n < width:
                ids[i, n] = EOS
        is_eos = ids == EOS
        eos_idx = torch.full((len(lengths),), width, dtype=torch.long)
        eos_idx[is_eos.any(1)] = is_eos.int().argmax(1)[is_eos.any(1)]
        mask = (torch.arange(width).expand(len(lengths), -1) <= eos_idx[:, None]).int()
        mask = mask * is_eos.any(1)[:, None].int()  # mask_truncated_completions
        self._work(0.2)  # reward functions
        if self.num_iterations > 1:
            self._get_per_token_logps(None, ids)
        if self.beta != 0.0:
            self._get_per_token_logps(None, ids)
        return {"completion_ids": ids, "completion_mask": mask}

    @profiling_decorator
    def compute_loss(self, model, inputs):
        self._get_per_token_logps(model, inputs["completion_ids"])
        self._work(0.5)
        return 0.0

    def training_step(self, micro):
        inputs = self._prepare_inputs(None)
        self.compute_loss(None, inputs)
        self._work(0.5)  # backward

    def optimizer_step(self):
        self._work(0.3)
