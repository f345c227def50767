"""A sampled prior: the endpoint passes measure a seeded sample of the pool,
stratified by group; every other row's score is predicted from what is cheap for every row.

Pure functions, shared by the frontier benchmark and the operators:

- :func:`stratified_sample` picks, in each group, the ``ceil(fraction x size)`` rows (at least
  one) whose hash of ``(seed, task id)`` is smallest: the same rows whatever the pool's order or
  batching, so the early and the late pass, a resumed run and every Ray actor agree on it.
- :func:`predict_scores` fits a model of the measured rows' scores on per-row features (for
  example a short early pass's pass rate) and the group, and predicts the others, each with an
  interval from the model's out-of-fold errors on the measured rows (split-conformal style: the
  ``ceil((n + 1) coverage)``-th smallest absolute residual of n). A group without a measured row gets the
  measured rows' mean score and interval, flagged as a fallback.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

#: fewer measured rows than this: the prediction is the group's (or the pool's) mean score
MIN_ROWS_FOR_A_MODEL = 20
PREDICTORS = ("gradient_boosting", "group_mean")


def sample_key(task_id, seed: int) -> float:
    """A row's place in the seeded order, in [0, 1): a hash of the seed and its task id."""
    digest = hashlib.blake2b(f"{seed}\x1f{task_id!r}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0 ** 64


def check_fraction(fraction: float) -> None:
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ValueError(f"sample_fraction must be a number in (0, 1], got {fraction!r}")


def rows_to_measure(fraction: float, group_size: int) -> int:
    """How many of a group's rows a sample at ``fraction`` measures: ``ceil(fraction x size)``, at
    least one (the tolerance keeps 0.1 x 30 at 3 despite floating point)."""
    return max(1, math.ceil(fraction * group_size - 1e-9))


def stratified_sample(ids: Sequence, fraction: float, seed: int, groups: Sequence | None = None) -> np.ndarray:
    """Which rows the endpoint passes measure: per group, the ``ceil(fraction x size)`` rows of
    smallest :func:`sample_key` (at least one per group); all rows when ``fraction`` is 1."""
    check_fraction(fraction)
    ids = list(ids)
    if len(set(map(repr, ids))) != len(ids):
        raise ValueError("a sampled prior needs unique task ids")
    groups = [None] * len(ids) if groups is None else list(groups)
    if len(groups) != len(ids):
        raise ValueError(f"{len(groups)} groups for {len(ids)} rows")
    keys = np.array([sample_key(task_id, seed) for task_id in ids])
    chosen = np.zeros(len(ids), dtype=bool)
    members: dict = {}
    for i, group in enumerate(groups):
        members.setdefault(repr(group), []).append(i)
    for rows in members.values():
        take = rows_to_measure(fraction, len(rows))
        chosen[np.array(rows)[np.argsort(keys[rows], kind="stable")[:take]]] = True
    return chosen


@dataclass(frozen=True)
class Prediction:
    """Every row's score: measured rows keep theirs (zero-width interval), the others predicted."""

    score: np.ndarray
    low: np.ndarray
    high: np.ndarray
    predicted: np.ndarray      #: bool: the row's score is a prediction
    fallback: np.ndarray       #: bool: predicted from the pool's mean (its group had no measured row)
    predictor: str
    interval_halfwidth: float  #: the out-of-fold absolute error at the coverage quantile (1: one measured row)

    def as_provenance(self, coverage: float) -> dict:
        return {"predictor": self.predictor, "coverage": coverage, "interval_halfwidth": self.interval_halfwidth,
                "measured_rows": int((~self.predicted).sum()), "predicted_rows": int(self.predicted.sum()),
                "fallback_rows": int(self.fallback.sum())}


def _design(features: np.ndarray, groups: list | None) -> np.ndarray:
    """The per-row features beside a one-hot column per group."""
    columns = [features]
    if groups is not None:
        names = sorted(set(map(repr, groups)))
        index = {name: j for j, name in enumerate(names)}
        onehot = np.zeros((len(groups), len(names)))
        onehot[np.arange(len(groups)), [index[repr(g)] for g in groups]] = 1.0
        columns.append(onehot)
    return np.hstack(columns) if columns else np.zeros((len(features), 0))


def _group_means(score: np.ndarray, measured: np.ndarray, groups: list | None) -> np.ndarray:
    """Each row's group mean of the measured scores (the pool's mean where a group has none)."""
    pool_mean = float(score[measured].mean())
    if groups is None:
        return np.full(len(score), pool_mean)
    keys = np.array([repr(g) for g in groups], dtype=object)
    means = {key: float(score[measured & (keys == key)].mean()) for key in set(keys[measured])}
    return np.array([means.get(key, pool_mean) for key in keys])


def _model(seed: int):
    try:
        from sklearn.ensemble import GradientBoostingRegressor
    except ImportError as exc:  # the analysis extra brings it
        raise ImportError("the sampled prior's predictor needs scikit-learn: pip install 'trajval_ops[analysis]'") from exc
    return GradientBoostingRegressor(n_estimators=150, max_depth=2, learning_rate=0.05, subsample=0.8,
                                     random_state=seed)


def predict_scores(score, measured, features=None, groups: Sequence | None = None, seed: int = 0,
                   coverage: float = 0.9, folds: int = 5) -> Prediction:
    """Every row's score from the measured rows' scores.

    :param score: the TrajVal (or any) score per row; read only where ``measured`` is true.
    :param measured: bool per row: the row's score was measured by the endpoint passes.
    :param features: ``rows x k`` numbers known for every row (a short early pass's pass rate,
        prompt length); ``None`` or no columns: the group alone.
    :param groups: each row's group (its one-hot columns join the features); ``None``: none.
    :param seed: the model's seed (the same seed, the same predictions).
    :param coverage: the share of out-of-fold errors the interval covers.
    :param folds: cross-validation folds for the out-of-fold errors.
    """
    score, measured = np.asarray(score, dtype=np.float64), np.asarray(measured, dtype=bool)
    if not 0 < coverage < 1:
        raise ValueError(f"coverage must be in (0, 1), got {coverage}")
    if not measured.any():
        raise ValueError("a sampled prior needs at least one measured row")
    if not np.isfinite(score[measured]).all():
        raise ValueError("every measured row needs a finite score")
    features = np.zeros((len(score), 0)) if features is None else np.asarray(features, dtype=np.float64).reshape(len(score), -1)
    groups = None if groups is None else list(groups)
    fallback = np.zeros(len(score), dtype=bool)
    if groups is not None:
        keys = np.array([repr(g) for g in groups], dtype=object)
        fallback = ~np.isin(keys, list(set(keys[measured])))
    x = _design(features, groups)
    n_measured = int(measured.sum())
    if features.shape[1] == 0 or n_measured < MIN_ROWS_FOR_A_MODEL:
        predictor, guess = "group_mean", _group_means(score, measured, groups)
        out_of_fold = _out_of_fold_group_means(score, measured, groups, folds, seed)
    else:
        predictor = "gradient_boosting"
        guess = np.clip(_model(seed).fit(x[measured], score[measured]).predict(x), 0.0, 1.0)
        out_of_fold = _out_of_fold_model(x[measured], score[measured], folds, seed)
    residual = np.abs(out_of_fold - score[measured])
    halfwidth = _conformal_halfwidth(residual, coverage)
    pool_mean = float(score[measured].mean())
    guess = np.where(fallback, pool_mean, guess)
    final = np.where(measured, score, guess)
    low = np.where(measured, score, np.clip(guess - halfwidth, 0.0, 1.0))
    high = np.where(measured, score, np.clip(guess + halfwidth, 0.0, 1.0))
    return Prediction(final, low, high, ~measured, fallback & ~measured, predictor, halfwidth)


def _conformal_halfwidth(residual: np.ndarray, coverage: float) -> float:
    """The ``ceil((n + 1) coverage)``-th smallest of ``n`` absolute residuals, the split-conformal
    quantile that covers a new row's error with probability ``coverage`` or more (an interpolated
    quantile covers less: 0.863 for 0.9 at n = 20); the whole range (1) where that rank is beyond
    n, as for one measured row, which predicts itself and measures no error."""
    n = residual.size
    rank = math.ceil((n + 1) * coverage - 1e-9)  # (n + 1) x 0.9 must not round up past an integer
    return float(np.sort(residual)[rank - 1]) if n >= 2 and rank <= n else 1.0


def _fold_of(n: int, folds: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).permutation(n) % max(2, min(folds, n))


def _out_of_fold_model(x: np.ndarray, y: np.ndarray, folds: int, seed: int) -> np.ndarray:
    fold, out = _fold_of(len(y), folds, seed), np.empty(len(y))
    for k in np.unique(fold):
        train = fold != k
        out[~train] = np.clip(_model(seed).fit(x[train], y[train]).predict(x[~train]), 0.0, 1.0)
    return out


def _out_of_fold_group_means(score, measured, groups, folds: int, seed: int) -> np.ndarray:
    at = np.flatnonzero(measured)
    if len(at) < 2:
        return score[at]
    fold, out = _fold_of(len(at), folds, seed), np.empty(len(at))
    for k in np.unique(fold):
        train = np.zeros(len(score), dtype=bool)
        train[at[fold != k]] = True
        out[fold == k] = _group_means(score, train, groups)[at[fold == k]]
    return out
