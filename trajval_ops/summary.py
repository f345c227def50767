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


#: A gain counts as "within noise" below this many standard errors of delta.
NOISE_Z = 2.0


def pass_rate_se(r, n) -> np.ndarray:
    """SE of pass rates estimated from n Bernoulli rollouts: ``sqrt(p (1 - p) / n)`` with ``p``
    taken as ``(k + 1) / (n + 2)`` (k = successes), so that 0/n and n/n rows are not given a
    zero SE."""
    n = np.maximum(np.asarray(n, dtype=np.float64), 1.0)  # rows not sampled (bad truth) have n = 0
    p = (np.asarray(r, dtype=np.float64) * n + 1.0) / (n + 2.0)
    return np.sqrt(p * (1.0 - p) / n)


def rollout_noise(r_early, r_late, n_early, n_late) -> dict:
    """Standard errors implied by ``n`` rollouts, and how many positive scores they could explain.

    SEs by :func:`pass_rate_se`; ``SE(delta) = sqrt(SE_early^2 + SE_late^2)`` (independent passes). A row with a
    positive score (the paper's, :func:`core.learnability_score`, whatever the estimator: a
    posterior mean is positive on every row) whose delta is below ``NOISE_Z`` x SE(delta) is
    *within noise*: the sampling noise of the two passes alone could have produced its gain.
    """
    r_early, r_late = np.asarray(r_early, dtype=np.float64), np.asarray(r_late, dtype=np.float64)
    se_early, se_late = pass_rate_se(r_early, n_early), pass_rate_se(r_late, n_late)
    se_delta = np.sqrt(se_early ** 2 + se_late ** 2)
    delta = r_late - r_early
    positive = core.learnability_score(r_early, r_late) > 0
    within = positive & (delta < NOISE_Z * se_delta)
    return {
        "se_r_early_median": round(float(np.median(se_early)), 4),
        "se_r_late_median": round(float(np.median(se_late)), 4),
        "se_delta_median": round(float(np.median(se_delta)), 4),
        "rows_with_positive_score": int(positive.sum()),
        "positive_scores_within_noise": int(within.sum()),
        "z": NOISE_Z,
    }


def log_rollout_noise(stage: str, noise: dict) -> None:
    """Log :func:`rollout_noise` and warn when most positive scores are within noise."""
    logger.info(f"{stage}: rollout noise {noise}")
    positive, within = noise["rows_with_positive_score"], noise["positive_scores_within_noise"]
    if positive and within > positive / 2:
        logger.warning(
            f"{stage}: {within} of the {positive} rows with a positive score have a gain below "
            f"{noise['z']:g} standard errors of delta (median SE {noise['se_delta_median']}): most of the prior is "
            "within the rollout noise of n. Raise n (the endpoint mapper's rollouts) or the probe's training."
        )


def group_noise(groups, r_early, r_late, n_early, n_late, weight) -> dict:
    """Does the prior differ between groups of tasks (families, sources) beyond rollout noise?

    Per group: rows, mean r_early, r_late, delta and weight, and the SE of the mean delta from
    the rows' rollout SEs (``sqrt(sum SE(delta_i)^2) / rows``). Between groups: Cochran's Q =
    sum over groups of ``((mean delta_g - pooled) / SE_g)^2`` with ``groups - 1`` degrees of
    freedom (the pooled mean weighted by ``1 / SE_g^2``), and the groups whose mean delta lies
    more than ``NOISE_Z`` SE from the pooled mean. Under pure rollout noise Q is about its
    degrees of freedom.
    """
    groups = np.asarray([str(g) for g in groups], dtype=object)
    delta = np.asarray(r_late, dtype=np.float64) - np.asarray(r_early, dtype=np.float64)
    se_delta = np.sqrt(pass_rate_se(r_early, n_early) ** 2 + pass_rate_se(r_late, n_late) ** 2)
    per_group, means, ses = {}, [], []
    for name in sorted(set(groups.tolist())):
        rows = groups == name
        count = int(rows.sum())
        mean_delta = float(delta[rows].mean())
        se = float(np.sqrt((se_delta[rows] ** 2).sum()) / count)
        means.append(mean_delta)
        ses.append(se)
        per_group[name] = {
            "rows": count, "r_early": round(float(np.mean(np.asarray(r_early)[rows])), 4),
            "r_late": round(float(np.mean(np.asarray(r_late)[rows])), 4), "delta": round(mean_delta, 4),
            "se_delta": round(se, 4), "weight": round(float(np.mean(np.asarray(weight)[rows])), 4),
        }
    means, ses = np.asarray(means), np.maximum(np.asarray(ses), 1e-12)
    pooled = float((means / ses ** 2).sum() / (1.0 / ses ** 2).sum())
    z = (means - pooled) / ses
    for name, value in zip(per_group, z):
        per_group[name]["z_vs_pooled"] = round(float(value), 2)
    return {
        "groups": per_group,
        "pooled_delta": round(pooled, 4),
        "cochran_q": round(float((z ** 2).sum()), 2),
        "df": len(per_group) - 1,
        "groups_beyond_noise": int((np.abs(z) > NOISE_Z).sum()),
        "z": NOISE_Z,
    }


def log_group_noise(stage: str, key: str, noise: dict) -> None:
    """Log :func:`group_noise` as a table, then one plain sentence on whether groups differ."""
    lines = [f"{'group':<16} {'rows':>5} {'r_early':>8} {'r_late':>8} {'delta':>8} {'SE':>7} {'z':>6} {'weight':>7}"]
    for name, g in noise["groups"].items():
        lines.append(f"{name[:16]:<16} {g['rows']:>5} {g['r_early']:>8.3f} {g['r_late']:>8.3f} {g['delta']:>+8.3f} "
                     f"{g['se_delta']:>7.3f} {g['z_vs_pooled']:>+6.1f} {g['weight']:>7.3f}")
    logger.info(f"{stage}: mean delta by {key} (SE from the rollouts; z against the pooled delta "
                f"{noise['pooled_delta']:+.4f}):\n" + "\n".join(lines))
    beyond, total, q, df = noise["groups_beyond_noise"], len(noise["groups"]), noise["cochran_q"], noise["df"]
    verdict = "differs" if beyond and q > 2 * max(df, 1) else "does not clearly differ"
    logger.info(f"{stage}: the probe's gain {verdict} between values of {key} beyond the rollout noise: "
                f"{beyond} of {total} groups more than {noise['z']:g} SE from the pooled delta "
                f"(Cochran's Q {q} on {df} degrees of freedom; about {df} under noise alone)")
