"""Pool-level summaries logged by the operators: weight quantiles, floor count, profile shares."""

from __future__ import annotations

from collections import Counter
from typing import Optional, Sequence

import numpy as np
from loguru import logger

from trajval_ops import core


def quantiles(values) -> dict:
    """min, quartiles and max, rounded for logs."""
    values = np.asarray(values, dtype=np.float64)
    if not values.size:
        return {}
    return dict(zip(("min", "p25", "p50", "p75", "max"), np.quantile(values, [0, 0.25, 0.5, 0.75, 1]).round(4).tolist()))


def weight_summary(weight: np.ndarray, eps: float, profiles: Optional[Sequence[str]] = None, **pass_rates) -> dict:
    """Figures of a weighted pool: size, pass-rate and weight quantiles, rows at the floor,
    weight share per profile. ``pass_rates``: named arrays (``r_early=...``) to summarise too."""
    weight = np.asarray(weight, dtype=np.float64)
    summary = {"rows": int(weight.size)}
    summary.update({f"{name}_quantiles": quantiles(values) for name, values in pass_rates.items()})
    summary["weight_quantiles"] = quantiles(weight)
    summary["at_floor"] = int(core.at_floor(weight, eps).sum())
    if profiles is not None and weight.size:
        total = weight.sum()
        profiles = np.asarray(profiles, dtype=object)
        counts = Counter(profiles.tolist())
        summary["profiles"] = {
            name: {"rows": counts.get(name, 0),
                   "weight_share": round(float(weight[profiles == name].sum() / total), 4)}
            for name in core.PROFILES
        }
    return summary


def log_weight_summary(stage: str, weight: np.ndarray, eps: float, profiles=None, **pass_rates) -> dict:
    """Log :func:`weight_summary` and warn when every row sits at the floor (a uniform prior)."""
    summary = weight_summary(weight, eps, profiles, **pass_rates)
    logger.info(f"{stage}: {summary}")
    if summary["rows"] and summary["at_floor"] == summary["rows"]:
        logger.warning(
            f"{stage}: every one of the {summary['rows']} rows has its weight at the floor eps={eps}: "
            "no task showed a gain from early to late, so the prior is uniform (as the paper's "
            "formula defines). Check the probe run (too short? learning rate?) before relying on it."
        )
    return summary
