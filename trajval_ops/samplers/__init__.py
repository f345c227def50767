"""Samplers that read ``trajval_weight`` for downstream trainers.

This package imports numpy only. Trainer adapters live in their own modules and import their
library on import: ``torch_sampler`` (PyTorch), ``trl`` (TRL GRPOTrainer), ``verl`` (verl 0.7.1
``data.sampler``), ``verl_dataset`` (verl 0.9+ ``data.custom_cls``), ``trinity`` (Trinity-RFT 0.6.0 selector), ``openrlhf`` (OpenRLHF prompts
dataloader). None imports Data-Juicer.
"""

from trajval_ops.samplers.online import (
    BotsScheduler,
    ComposedSampler,
    GresoScheduler,
    group_feedback,
    rollout_groups,
    zero_variance_mask,
)
from trajval_ops.samplers.weighted import WeightedIndexSampler, weights_from_column, weights_from_dataset

__all__ = [
    "BotsScheduler",
    "ComposedSampler",
    "GresoScheduler",
    "WeightedIndexSampler",
    "group_feedback",
    "rollout_groups",
    "weights_from_column",
    "weights_from_dataset",
    "zero_variance_mask",
]
