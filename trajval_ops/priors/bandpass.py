"""The band-pass prior: ``s = 1`` where ``band_low < r_early < band_high``, else 0 (DAPO's
dynamic-sampling filter applied once: groups with all-correct or all-wrong rollouts carry no
GRPO gradient), weighted ``w = max(s, eps)`` from the early pass alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trajval_ops import core
from trajval_ops.priors.base import Interval, Prior, rates
from trajval_ops.settings import setting


@dataclass(frozen=True)
class BandPass(Prior):
    name: ClassVar[str] = "bandpass"
    formula: ClassVar[str] = "`s = 1{band_low < r_early < band_high}`, `w = max(s, eps)`"

    band_low: float = setting(0.0, "Lower edge of the band, exclusive (0: drop rows the early model never "
                              "solves).", ge=0, lt=1)
    band_high: float = setting(1.0, "Upper edge of the band, exclusive (1: drop rows it always solves).", gt=0, le=1)

    def __post_init__(self):
        super().__post_init__()
        core.check_band(self.band_low, self.band_high)

    def score(self, r_early, r_late=None) -> np.ndarray:
        return core.bandpass_score(r_early, self.band_low, self.band_high)

    def weight(self, score) -> np.ndarray:
        return core.bandpass_weight(score, self.eps)

    def weight_range(self, early: Interval, late: Interval | None = None) -> Interval:
        low, high = rates(early[0]), rates(early[1])
        # the closed interval meets the open band / leaves it
        meets = (low < self.band_high) & (high > self.band_low)
        leaves = (low <= self.band_low) | (high >= self.band_high)
        return np.where(leaves, self.eps, 1.0), np.where(meets, 1.0, self.eps)

    def provenance(self) -> dict:
        return {"eps": self.eps, "score": self.name, "band": [self.band_low, self.band_high]}
