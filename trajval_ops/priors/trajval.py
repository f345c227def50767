"""TrajVal (the paper, section 4.2): ``s = (1 - r_early) * max(0, r_late - r_early)``,
``w = max(s ** alpha, eps)``, read from an early and a late endpoint pass; with the
noise-aware estimators (``posterior``, ``pooled``) the expected s under a beta-binomial model of
each end's k successes in n rollouts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trajval_ops import core
from trajval_ops.priors.base import Interval, PassRates, Prior, Scores, rates
from trajval_ops.settings import setting


@dataclass(frozen=True)
class TrajVal(Prior):
    name: ClassVar[str] = "trajval"
    passes: ClassVar[tuple[str, ...]] = ("early", "late")
    formula: ClassVar[str] = "`s = (1 - r_early) * max(0, r_late - r_early)`, `w = max(s ** alpha, eps)`"
    #: the noise-aware estimators' scores from the same passes
    variants: ClassVar = {"trajval_posterior": {"estimator": "posterior"}, "trajval_pooled": {"estimator": "pooled"}}

    alpha: float = setting(core.DEFAULT_ALPHA, "Power-compression exponent of the weight, `w = max(s ** alpha, "
                           "eps)`; < 1 flattens the score range (the paper's 0.3).", gt=0)
    estimator: str = setting("paper", "How the score reads the pass rates: `paper` (as exact), `posterior` (the "
                             "expected s under a beta-binomial model of each end's k of n rollouts, the beta prior "
                             "fitted on the pool) or `pooled` (fitted on each row's `group_key` group).",
                             choices=core.ESTIMATORS)

    def __post_init__(self):
        super().__post_init__()
        core.check_alpha_eps(self.alpha, self.eps)

    @property
    def per_row(self) -> bool:
        return self.estimator == "paper"  # the others shrink each row toward the pool's (group's) fit

    @property
    def rollouts_read_by(self) -> str:
        return "" if self.estimator == "paper" else f"estimator {self.estimator!r}"

    @property
    def groups_read_by(self) -> str:
        return f"estimator {self.estimator!r}" if self.estimator == "pooled" else ""

    def score(self, r_early, r_late=None) -> np.ndarray:
        if r_late is None:
            raise ValueError("TrajVal reads an early and a late pass rate")
        return core.learnability_score(r_early, r_late)

    def weight(self, score) -> np.ndarray:
        return core.sampling_weight(score, self.alpha, self.eps)

    def estimate(self, r_early, n_early, r_late, n_late, groups=None):
        """The noise-aware score (:func:`trajval_ops.core.noise_aware_score`) of the estimator:
        ``(mean, low, high, fitted beta priors)``."""
        return core.noise_aware_score(self.estimator, r_early, n_early, r_late, n_late, groups)

    def scores(self, rates: PassRates) -> Scores:
        """The paper's score, or the estimator's posterior mean with its interval (the beta priors
        fitted on the pool, or per group, recorded)."""
        if self.estimator == "paper":
            return super().scores(rates)
        try:
            mean, low, high, fitted = self.estimate(rates.early, rates.rollouts[0], rates.late, rates.rollouts[1],
                                                    rates.groups)
        except ValueError as exc:
            raise ValueError(f"estimator {self.estimator!r}: {exc}") from None
        return Scores(mean, self.weight(mean), low, high, {"beta_priors": fitted, "interval_mass": core.INTERVAL_MASS,
                                                            "posterior_grid": core.POSTERIOR_GRID})

    def weight_range(self, early: Interval, late: Interval | None = None) -> Interval:
        # s falls with r_early and rises with r_late, and w rises with s
        if late is None:
            raise ValueError("TrajVal's weight range needs the late pass rate's interval")
        return (self.weights(rates(early[1]), rates(late[0])), self.weights(rates(early[0]), rates(late[1])))

    def provenance(self) -> dict:
        return {"alpha": self.alpha, "eps": self.eps, "score": self.name, "estimator": self.estimator}
