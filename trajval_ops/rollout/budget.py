"""An adaptive rollout budget: rollouts in rounds, a row stops once more rollouts can no longer
move the weight the recipe's prior writes by more than a stated tolerance.

The rule is exact (no probability of being wrong): after ``k`` successes in ``m`` of a cap of
``n`` rollouts, the row's pass rate at the cap lies in ``[k / n, (k + n - m) / n]``, and the
prior declares the range its weight can take over such intervals
(:meth:`~trajval_ops.priors.base.Prior.weight_range`; TrajVal's ``w = max(s ** alpha, eps)``
with ``s = (1 - r_early) * max(0, r_late - r_early)`` is monotone in each pass rate, the
variance prior peaks at 0.5):

- a **late** pass (the row's early pass rate read from the pool) stops a row when the weight's
  range over the late interval is within the tolerance; a row whose early pass rate is 1 has
  ``s = 0`` whatever its late pass gives, so it is not sampled at all (its late pass rate is
  written as its early one: delta 0, profile ``mastered``). A one-pass prior reads no late pass:
  an adaptive late pass has nothing to stop on and is refused;
- an **early** pass stops a row when the weight's range over the early interval and any late
  pass rate is within the tolerance.

The pass rate written for a stopped row is ``k / m``, which lies in the interval above, so its
weight is within the tolerance of the weight the full ``n`` would have given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from trajval_ops.priors.base import Prior

#: Row statuses of an adaptive pass (beside the pass module's ok / bad ground truth / truncated).
STATUS_STOPPED = "stopped_weight_bounded"
STATUS_SKIPPED = "skipped_early_saturated"
BUDGETS = ("fixed", "adaptive")
#: the weight change a stopped row may leave unseen, unless a recipe says otherwise
DEFAULT_TOLERANCE = 0.05


@dataclass(frozen=True)
class AdaptiveBudget:
    """The stopping rule of one pass.

    :param window: ``early`` or ``late`` (which pass of the prior this pass measures).
    :param cap: the most rollouts a row gets (the pass's ``n``).
    :param round_size: rollouts per row per round.
    :param prior: the prior whose weight the rule bounds: the one the recipe's learnability
        mapper writes, with its settings (alpha, eps, ...).
    :param tolerance: the largest change of the weight that stopping may leave unseen.
    """

    window: str
    cap: int
    round_size: int
    prior: Prior
    tolerance: float = DEFAULT_TOLERANCE

    def __post_init__(self):
        if self.window not in ("early", "late"):
            raise ValueError(f"an adaptive budget belongs to the early or the late pass, got window {self.window!r}")
        if not 1 <= self.round_size <= self.cap:
            raise ValueError(f"round_size must be in [1, n = {self.cap}], got {self.round_size}")
        if not 0 <= self.tolerance < 1:
            raise ValueError(f"the weight tolerance must be in [0, 1), got {self.tolerance}")
        if not self.prior.per_row:
            raise ValueError(f"the adaptive budget bounds each row's weight from its own rollouts, and the "
                             f"{self.prior.name} prior's settings {self.prior.settings()} make a row's weight depend on "
                             "the whole pool's: use budget: fixed (or estimator: paper)")
        if self.window not in self.prior.passes:
            raise ValueError(f"an adaptive late pass stops rows on the weight of the prior the recipe writes, and the "
                             f"{self.prior.name} prior reads no late pass: its weight does not depend on this pass; "
                             "use budget: fixed (or drop the pass)")

    def as_dict(self) -> dict:
        return {"budget": "adaptive", "rule": "weight_bounded", "window": self.window, "cap": self.cap,
                "round_size": self.round_size, "tolerance": self.tolerance, **self._prior_fields()}

    def _prior_fields(self) -> dict:
        """The prior as the budget's record names it (TrajVal's alpha and eps as they were named
        before other priors could be bounded, so a TrajVal pass keeps its cache key and provenance)."""
        spec = self.prior.spec()
        if spec == {"prior": "trajval", "eps": spec.get("eps"), "alpha": spec.get("alpha"), "estimator": "paper"}:
            return {"alpha": spec["alpha"], "eps": spec["eps"]}
        return {"weight_prior": spec}

    def weight_range(self, successes, rollouts, r_early=None) -> tuple[np.ndarray, np.ndarray]:
        """The lowest and highest weight a row can still reach at the cap."""
        successes, rollouts = np.asarray(successes, dtype=np.float64), np.asarray(rollouts, dtype=np.float64)
        low = successes / self.cap
        high = (successes + self.cap - rollouts) / self.cap
        if self.window == "late":
            early = np.asarray(r_early, dtype=np.float64)
            return self.prior.weight_range((early, early), (low, high))
        # early: the late pass rate is not known yet, anywhere in [0, 1]
        late = None if self.prior.one_pass else (np.zeros_like(low), np.ones_like(low))
        return self.prior.weight_range((low, high), late)

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


def recorded_prior_spec(record: Any) -> dict | None:
    """The spec of the prior whose weight an adaptive budget bounded, from its record (a pass's
    provenance ``budget``, :meth:`AdaptiveBudget.as_dict`); None for a fixed budget or none. A
    record read back through Arrow holds the keys of other rows' records as nulls: left out."""
    from trajval_ops.priors import prior_from_spec

    if not isinstance(record, Mapping) or record.get("budget") != "adaptive":
        return None
    given = record.get("weight_prior")
    if not isinstance(given, Mapping):  # TrajVal's paper weight, by its alpha and eps
        given = {"prior": "trajval", "alpha": record.get("alpha"), "eps": record.get("eps"), "estimator": "paper"}
    spec = {key: value for key, value in given.items() if value is not None}
    try:
        return prior_from_spec(spec).spec()
    except ValueError:  # a record of a prior or setting this version does not know: compared as it is
        return spec
