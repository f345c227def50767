"""LIMR's Learning Impact Measurement (Li, Zou and Liu, "LIMR: Less is More for RL Scaling",
arXiv 2502.11886; code: GAIR-NLP/LIMR, ``lim/lim_selection.py``): a task is worth training on
when its pass-rate trajectory over a run follows the run's average learning curve.

With ``r_k`` a task's pass rate at checkpoint k and ``rbar_k`` the pool's mean at k, its score is
``s = 1 - sum_k (r_k - rbar_k)^2 / sum_k (1 - rbar_k)^2``: 1 on the average curve, 0 as far from it
as a task solved at every checkpoint, below 0 farther still. The paper selects the tasks with
``s > 0.6`` (1,389 of MATH's 8,523), from the training rewards of a full RL run on the pool, one
point per epoch; here the trajectory is what the pool records: the passes of a probe's
checkpoints (early window, those between, late window), or in ``trajval validate`` a full run's
dense evaluations. The soft form weights each task by its score (``w = max(s, eps)``), the
hard cut keeps the paper's selection (``w = 1`` where ``s > threshold``, else 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trajval_ops.priors.base import Interval, PassRates, Prior, Scores, rates
from trajval_ops.settings import setting

#: the paper's selection threshold (section 2.2.2: "setting theta = 0.6 yielded ... 1,389 samples")
PAPER_THRESHOLD = 0.6


def lim_scores(trajectories) -> np.ndarray:
    """The LIM score of each row of ``trajectories`` (rows x checkpoints, pass rates in [0, 1])
    against the rows' mean curve.

    :raises ValueError: fewer than two checkpoints, or a mean curve at 1 everywhere (every task
        solved at every checkpoint: the score's scale is 0).
    """
    r = rates(trajectories)
    if r.ndim != 2 or r.shape[1] < 2:
        raise ValueError(f"LIMR reads each task's pass rate at two checkpoints or more, got shape {r.shape}")
    mean_curve = r.mean(axis=0)
    scale = np.sum((1.0 - mean_curve) ** 2)
    if not scale > 0:
        raise ValueError("the pool's mean pass rate is 1 at every checkpoint: LIMR's score has no scale")
    return 1.0 - np.sum((r - mean_curve) ** 2, axis=1) / scale


@dataclass(frozen=True)
class Limr(Prior):
    name: ClassVar[str] = "limr"
    passes: ClassVar[tuple[str, ...]] = ("early", "late")
    formula: ClassVar[str] = ("`s = 1 - sum_k (r_k - rbar_k)^2 / sum_k (1 - rbar_k)^2` over the checkpoints k "
                              "(`rbar`: the pool's mean curve), `w = max(s, eps)`; `cut`: `w = 1{s > threshold}`")
    reads_checkpoints: ClassVar[bool] = True
    #: the paper's selection
    variants: ClassVar = {"limr_cut": {"cut": True}}

    threshold: float = setting(PAPER_THRESHOLD, "LIM score a task must exceed to be kept by the hard cut (the "
                               "paper's 0.6).", lt=1)
    cut: bool = setting(False, "The paper's hard cut: weight 1 where `s > threshold`, else 0 (false: the soft "
                        "weight `w = max(s, eps)`).")

    @property
    def per_row(self) -> bool:
        return False  # the mean curve is the pool's

    def score(self, r_early, r_late=None) -> np.ndarray:
        if r_late is None:
            raise ValueError("LIMR reads a trajectory of two checkpoints or more")
        return lim_scores(np.stack([rates(r_early), rates(r_late)], axis=1))

    def weight(self, score) -> np.ndarray:
        score = rates(score)
        if self.cut:
            return (score > self.threshold).astype(np.float64)
        return np.maximum(score, self.eps)

    def scores(self, rates_: PassRates) -> Scores:
        trajectories = rates_.checkpoints
        if trajectories is None:
            trajectories = np.stack([rates(rates_.early), rates(rates_.late)], axis=1)
        score = lim_scores(trajectories)
        weight = self.weight(score)
        if self.cut and not weight.any():
            raise ValueError(f"no task's LIM score exceeds threshold {self.threshold} (the highest is "
                             f"{score.max():.4g}): the hard cut keeps nothing")
        return Scores(score, weight)

    def weight_range(self, early: Interval, late: Interval | None = None) -> Interval:
        raise ValueError("LIMR's weight depends on the pool's mean curve, not on a row's own passes alone")

    def provenance(self) -> dict:
        return {"eps": self.eps, "score": self.name, "threshold": self.threshold, "cut": self.cut}
