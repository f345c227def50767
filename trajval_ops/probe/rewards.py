"""Reward functions for TRL's GRPOTrainer built on the shared verifiers (trajval_ops.rollout)."""

from __future__ import annotations

import json
from typing import Any, Callable

from trajval_ops.fields import TRAIN_GROUND_TRUTH, TRAIN_ROW_JSON


def verifier_reward(verifier) -> Callable[..., list[float]]:
    """Wrap ``verifier(completion, ground_truth, row)`` as a TRL reward function.

    TRL calls it with the prompts, the completions (strings: our prompts are pre-rendered text)
    and every dataset column as a keyword list, one entry per completion.
    """

    def reward(prompts: list[Any], completions: list[Any], **columns) -> list[float]:
        truths = columns[TRAIN_GROUND_TRUTH]
        rows = columns[TRAIN_ROW_JSON]
        return [
            float(verifier(_completion_text(completion), json.loads(truth), json.loads(row)))
            for completion, truth, row in zip(completions, truths, rows)
        ]

    # TRL logs per-function rewards under this name.
    reward.__name__ = f"verifier_{verifier.spec.get('name', 'custom')}"
    return reward


def _completion_text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    # conversational completion: [{"role": "assistant", "content": ...}]
    return "".join(message.get("content", "") for message in completion)
