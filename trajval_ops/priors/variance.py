"""The variance prior: ``s = r_early (1 - r_early)``, the Bernoulli variance of a task's reward
(largest at 0.5, the prior of variance- or "moderate difficulty"-based curricula), weighted
``w = max(4 s, eps)`` (1 at r = 0.5) from the early pass alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trajval_ops import core
from trajval_ops.priors.base import Interval, Prior, rates


@dataclass(frozen=True)
class Variance(Prior):
    name: ClassVar[str] = "variance"
    formula: ClassVar[str] = "`s = r_early (1 - r_early)`, `w = max(4 s, eps)`"

    def score(self, r_early, r_late=None) -> np.ndarray:
        return core.variance_score(r_early)

    def weight(self, score) -> np.ndarray:
        return core.variance_weight(score, self.eps)

    def weight_range(self, early: Interval, late: Interval | None = None) -> Interval:
        low, high = rates(early[0]), rates(early[1])
        # r (1 - r) peaks at 0.5 and falls away from it: the highest at the point nearest 0.5,
        # the lowest at an end
        at_ends = np.minimum(self.weights(low), self.weights(high))
        return at_ends, self.weights(np.clip(0.5, low, high))

    def provenance(self) -> dict:
        return {"eps": self.eps, "score": self.name}
