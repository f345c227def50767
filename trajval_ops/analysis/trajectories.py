"""Dense per-checkpoint reward trajectories: descriptors, the six Figure-1 profiles, slope-R^2.

A trajectory is one task's accuracy at each of T checkpoints (an ``(n_tasks, T)`` array, values
in [0, 1]).  The paper (section 3.1, Figure 1) summarises it by three descriptors:

- ``delta``: reward gain ``r_late - r_early``, with ``r_early`` / ``r_late`` the means of the first
  and last ``window`` checkpoints (``core.window_mean``; ``window=1`` compares the endpoints);
- ``sigma``: population standard deviation (ddof=0) of the T accuracies;
- ``r2``: coefficient of determination of the least-squares line through (x_t, acc_t); a
  constant trajectory has no variance to explain and gets ``r2 = 0``.

Figure-1 criteria (defaults in :class:`ProfileThresholds`):

==============  =========================================================
stable          delta > 0.4 and (R^2 > 0.4 or sigma <= 0.35)
sluggish        0.15 < delta <= 0.4, or sigma > 0.35
ineffective     -0.05 < delta <= 0.15 and sigma <= 0.35
mastered        r_early > 0.9 and delta < 0.1
unlearned       r_late < 0.1 and delta < 0.1
forgetting      delta < -0.05
==============  =========================================================

The criteria overlap (a flat task at 0.95 is both ``ineffective`` and ``mastered``; a noisy
declining one is both ``sluggish`` and ``forgetting``) and leave gaps (``delta == -0.05`` with
``sigma <= 0.35`` matches nothing).  Rule ``saturation_first`` — the same order as the endpoint
approximation in :func:`trajval_ops.core.endpoint_profiles` — resolves them: criteria are tried
in the order mastered, unlearned, forgetting, stable, sluggish, ineffective and the first match
wins; a row matching none is labelled ``ineffective`` (its gain is in the flat band's closed
edge).  :func:`profile_criteria` returns the raw matches so overlaps and gaps can be counted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from trajval_ops import core

#: Order in which overlapping criteria are resolved (first match wins).
RESOLUTION_ORDER = ("mastered", "unlearned", "forgetting", "stable", "sluggish", "ineffective")
#: Label of a row that matches no criterion.
UNMATCHED_LABEL = "ineffective"


@dataclass(frozen=True)
class ProfileThresholds:
    """Figure-1 thresholds (paper defaults)."""

    stable_delta: float = 0.4
    stable_r2: float = 0.4
    sigma: float = 0.35
    sluggish_delta: float = 0.15
    flat_delta: float = -0.05
    saturated_delta: float = 0.1
    mastered_r_early: float = 0.9
    unlearned_r_late: float = 0.1

    def as_dict(self) -> dict:
        return asdict(self)


def _checkpoint_matrix(acc) -> np.ndarray:
    acc = np.asarray(acc, dtype=np.float64)
    if acc.ndim != 2 or acc.shape[1] < 2:
        raise ValueError(f"trajectories must have shape (n_tasks, T>=2), got {acc.shape}")
    core.window_mean(acc)  # validates finiteness and [0, 1] with the offending row's position
    return acc


def _checkpoint_positions(x, n_checkpoints: int) -> np.ndarray:
    if x is None:
        return np.arange(n_checkpoints, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    if x.shape != (n_checkpoints,) or not np.all(np.isfinite(x)) or np.ptp(x) == 0:
        raise ValueError(f"checkpoint positions must be {n_checkpoints} finite, not all equal values")
    return x


def linear_fit(acc, x=None) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares line of each trajectory: ``(slope, r2)``, slope per unit of ``x``.

    :param acc: ``(n_tasks, T)`` accuracies.
    :param x: checkpoint positions (epochs or steps); default ``0..T-1``.
    """
    acc = _checkpoint_matrix(acc)
    x = _checkpoint_positions(x, acc.shape[1])
    xc = x - x.mean()
    yc = acc - acc.mean(axis=1, keepdims=True)
    sxx = float(xc @ xc)
    sxy = yc @ xc
    syy = np.einsum("ij,ij->i", yc, yc)
    slope = sxy / sxx
    with np.errstate(divide="ignore", invalid="ignore"):
        r2 = np.where(syy > 0, sxy**2 / (sxx * syy), 0.0)
    return slope, np.clip(r2, 0.0, 1.0)


def trajectory_descriptors(acc, window: int = 1, x=None) -> dict[str, np.ndarray]:
    """Per-task ``r_early``, ``r_late``, ``delta``, ``sigma``, ``slope`` and ``r2``.

    :param acc: ``(n_tasks, T)`` accuracies in [0, 1].
    :param window: K, the number of first / last checkpoints averaged into r_early / r_late.
    :param x: checkpoint positions for the linear fit; default ``0..T-1``.
    """
    acc = _checkpoint_matrix(acc)
    if not 1 <= window <= acc.shape[1] // 2:
        raise ValueError(f"window must be in [1, T/2] = [1, {acc.shape[1] // 2}], got {window}")
    r_early = core.window_mean(acc[:, :window])
    r_late = core.window_mean(acc[:, -window:])
    slope, r2 = linear_fit(acc, x)
    return {
        "r_early": r_early,
        "r_late": r_late,
        "delta": core.reward_delta(r_early, r_late),
        "sigma": acc.std(axis=1),
        "slope": slope,
        "r2": r2,
    }


def profile_criteria(r_early, r_late, sigma, r2, thresholds: ProfileThresholds = ProfileThresholds()) -> np.ndarray:
    """Boolean matrix ``(n_tasks, 6)``: which Figure-1 criteria each task meets, columns in
    :data:`trajval_ops.core.PROFILES` order (before any overlap resolution)."""
    t = thresholds
    r_early = np.asarray(r_early, dtype=np.float64)
    r_late = np.asarray(r_late, dtype=np.float64)
    sigma = np.asarray(sigma, dtype=np.float64)
    r2 = np.asarray(r2, dtype=np.float64)
    delta = core.profile_delta(r_early, r_late)  # the endpoint rule's rounding: one rule for both
    matches = {
        "stable": (delta > t.stable_delta) & ((r2 > t.stable_r2) | (sigma <= t.sigma)),
        "sluggish": ((delta > t.sluggish_delta) & (delta <= t.stable_delta)) | (sigma > t.sigma),
        "ineffective": (delta > t.flat_delta) & (delta <= t.sluggish_delta) & (sigma <= t.sigma),
        "mastered": (core.profile_rate(r_early) > core.profile_rate(t.mastered_r_early)) & (delta < t.saturated_delta),
        "unlearned": (core.profile_rate(r_late) < core.profile_rate(t.unlearned_r_late)) & (delta < t.saturated_delta),
        "forgetting": delta < t.flat_delta,
    }
    return np.stack([matches[name] for name in core.PROFILES], axis=1)


def resolve_profiles(criteria: np.ndarray) -> np.ndarray:
    """One label per row from a :func:`profile_criteria` matrix by rule ``saturation_first``."""
    criteria = np.asarray(criteria, dtype=bool)
    columns = {name: criteria[:, i] for i, name in enumerate(core.PROFILES)}
    return np.select(
        [columns[name] for name in RESOLUTION_ORDER], list(RESOLUTION_ORDER), default=UNMATCHED_LABEL
    ).astype(object)


def trajectory_profiles(acc, window: int = 1, x=None, thresholds: ProfileThresholds = ProfileThresholds()) -> dict:
    """Descriptors plus the Figure-1 profile of every trajectory.

    :return: the dict of :func:`trajectory_descriptors` plus ``profile`` (labels),
        ``learnable`` (the binary grouping, ``core.is_learnable``) and ``n_matched`` (how many
        criteria the row met: > 1 means an overlap was resolved, 0 means the fallback label).
    """
    out = trajectory_descriptors(acc, window=window, x=x)
    criteria = profile_criteria(out["r_early"], out["r_late"], out["sigma"], out["r2"], thresholds)
    out["profile"] = resolve_profiles(criteria)
    out["learnable"] = core.is_learnable(out["profile"])
    out["n_matched"] = criteria.sum(axis=1)
    return out


def slope_r2_projection(acc, r_early=None, r_late=None, window: int = 1, x=None) -> dict[str, np.ndarray]:
    """The paper's Figure 3: each trajectory's (slope, R^2), labelled by the endpoint-only profile.

    The labels come from ``core.endpoint_profiles`` on the endpoint pair — the probe estimates
    when ``r_early``/``r_late`` are given, else the trajectory's own first/last windows — so the
    projection checks the endpoint approximation against a trajectory-derived space.
    """
    acc = _checkpoint_matrix(acc)
    slope, r2 = linear_fit(acc, x)
    if (r_early is None) != (r_late is None):
        raise ValueError("give both r_early and r_late, or neither")
    if r_early is None:
        desc = trajectory_descriptors(acc, window=window, x=x)
        r_early, r_late = desc["r_early"], desc["r_late"]
    r_early = np.asarray(r_early, dtype=np.float64)
    r_late = np.asarray(r_late, dtype=np.float64)
    if r_early.shape != (acc.shape[0],) or r_late.shape != (acc.shape[0],):
        raise ValueError(f"r_early/r_late must have one value per trajectory ({acc.shape[0]})")
    return {"slope": slope, "r2": r2, "profile": core.endpoint_profiles(r_early, r_late)}
