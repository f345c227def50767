"""An adaptive rollout budget: rollouts in rounds, a row stops once more rollouts can no longer
move its TrajVal weight by more than a stated tolerance.

The rule is exact (no probability of being wrong): after ``k`` successes in ``m`` of a cap of
``n`` rollouts, the row's pass rate at the cap lies in ``[k / n, (k + n - m) / n]``, and the
weight ``w = max(s ** alpha, eps)`` with ``s = (1 - r_early) * max(0, r_late - r_early)`` is
monotone in each pass rate, so its range over that interval is known:

- a **late** pass (the row's early pass rate read from the pool) stops a row when
  ``w(r_hi) - w(r_lo) <= tolerance``; a row whose early pass rate is 1 has ``s = 0`` whatever
  its late pass gives, so it is not sampled at all (its late pass rate is written as its early
  one: delta 0, profile ``mastered``);
- an **early** pass stops a row when the weight cannot exceed the floor by more than the
  tolerance for any late pass rate: ``w((1 - r_lo)^2) - eps <= tolerance``.

The pass rate written for a stopped row is ``k / m``, which lies in the interval above, so its
weight is within the tolerance of the weight the full ``n`` would have given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trajval_ops import core

#: Row statuses of an adaptive pass (beside the pass module's ok / bad ground truth / truncated).
STATUS_STOPPED = "stopped_weight_bounded"
STATUS_SKIPPED = "skipped_early_saturated"
BUDGETS = ("fixed", "adaptive")
#: the weight change a stopped row may leave unseen, unless a recipe says otherwise
DEFAULT_TOLERANCE = 0.05


@dataclass(frozen=True)
class AdaptiveBudget:
    """The stopping rule of one pass.

    :param window: ``early`` or ``late`` (which end of the score the pass measures).
    :param cap: the most rollouts a row gets (the pass's ``n``).
    :param round_size: rollouts per row per round.
    :param tolerance: the largest change of the weight that stopping may leave unseen.
    """

    window: str
    cap: int
    round_size: int
    tolerance: float = DEFAULT_TOLERANCE
    alpha: float = core.DEFAULT_ALPHA
    eps: float = core.DEFAULT_EPS

    def __post_init__(self):
        if self.window not in ("early", "late"):
            raise ValueError(f"an adaptive budget belongs to the early or the late pass, got window {self.window!r}")
        if not 1 <= self.round_size <= self.cap:
            raise ValueError(f"round_size must be in [1, n = {self.cap}], got {self.round_size}")
        if not 0 <= self.tolerance < 1:
            raise ValueError(f"the weight tolerance must be in [0, 1), got {self.tolerance}")
        core.check_alpha_eps(self.alpha, self.eps)

    def as_dict(self) -> dict:
        return {"budget": "adaptive", "rule": "weight_bounded", "window": self.window, "cap": self.cap,
                "round_size": self.round_size, "tolerance": self.tolerance, "alpha": self.alpha, "eps": self.eps}

    def _weight(self, r_early, r_late) -> np.ndarray:
        return core.sampling_weight(core.learnability_score(r_early, r_late), self.alpha, self.eps)

    def weight_range(self, successes, rollouts, r_early=None) -> tuple[np.ndarray, np.ndarray]:
        """The lowest and highest weight a row can still reach at the cap."""
        successes, rollouts = np.asarray(successes, dtype=np.float64), np.asarray(rollouts, dtype=np.float64)
        low = successes / self.cap
        high = (successes + self.cap - rollouts) / self.cap
        if self.window == "late":
            return self._weight(r_early, low), self._weight(r_early, high)
        # early: the late pass rate is unknown; s peaks at r_late = 1, where it is (1 - r_early)^2
        return np.full(low.shape, self.eps), self._weight(low, np.ones_like(low))

    def decided(self, successes, rollouts, r_early=None) -> np.ndarray:
        """Whether each row may stop: at the cap, or its weight pinned within the tolerance after
        at least one round (a pass rate needs rollouts; a tolerance as wide as the weight's range
        still samples each row once). Before any round only a late row whose early pass rate is
        1 stops: its s is 0 whatever its late pass gives."""
        low, high = self.weight_range(successes, rollouts, r_early)
        rollouts = np.asarray(rollouts)
        pinned = (high - low <= self.tolerance) & (rollouts > 0)
        if self.window == "late":
            pinned = pinned | ((rollouts == 0) & (np.asarray(r_early) >= 1))
        return (rollouts >= self.cap) | pinned
