"""Stability and agreement statistics (paper sections 3.2 and 4.1, appendix "diagnostic").

- :func:`spearman`: rank correlation of two estimates of one quantity (probe vs oracle
  ``r_early``, ``r_late``, score);
- :func:`cohens_kappa` / :func:`profile_agreement`: agreement of profile labels over shared
  tasks, six-way and under the binary learnable grouping;
- :func:`score_distribution`: the paper's per-profile score table (share of total weight, mean
  score, fraction at the floor), with the learnable / non-learnable combined rows;
- :func:`probe_epoch_stability`: Spearman of the score at probe epoch k against the final one;
- :func:`group_spearman`: Spearman of two estimates' group means (per task family).
"""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
from scipy.stats import rankdata

from trajval_ops import core


def _paired(a, b, name: str) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"{name}: need two 1-D arrays of equal length, got {a.shape} and {b.shape}")
    if a.size < 2:
        raise ValueError(f"{name}: need at least 2 paired values, got {a.size}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError(f"{name}: non-finite value")
    return a, b


def spearman(a, b) -> float:
    """Spearman's rho: Pearson correlation of the average ranks (ties share their mean rank).

    Returns NaN (with a RuntimeWarning) when either input is constant: rank order is undefined.
    """
    a, b = _paired(a, b, "spearman")
    ra = rankdata(a) - (a.size + 1) / 2.0
    rb = rankdata(b) - (b.size + 1) / 2.0
    denom = np.sqrt((ra @ ra) * (rb @ rb))
    if denom == 0:
        warnings.warn("spearman: an input is constant; rho is undefined (NaN)", RuntimeWarning, stacklevel=2)
        return float("nan")
    return float((ra @ rb) / denom)


def group_spearman(a, b, groups: Sequence) -> float:
    """Spearman of ``a``'s per-group means against ``b``'s (groups in sorted order; each group's
    mean over its rows)."""
    a, b = _paired(a, b, "group_spearman")
    at = np.asarray(groups, dtype=object)
    if at.shape != a.shape:
        raise ValueError(f"group_spearman: {at.size} groups for {a.size} values")
    names = sorted(set(at.tolist()), key=repr)
    return spearman([a[at == g].mean() for g in names], [b[at == g].mean() for g in names])


def confusion_matrix(labels_a: Sequence, labels_b: Sequence, categories: Sequence) -> np.ndarray:
    """Counts ``C[i, j]`` of tasks labelled ``categories[i]`` by rater a and ``categories[j]`` by b."""
    labels_a = np.asarray(labels_a, dtype=object)
    labels_b = np.asarray(labels_b, dtype=object)
    if labels_a.ndim != 1 or labels_a.shape != labels_b.shape:
        raise ValueError(f"labels must be two 1-D sequences of equal length, got {labels_a.shape} and {labels_b.shape}")
    index = {c: i for i, c in enumerate(categories)}
    unknown = sorted({str(x) for x in np.concatenate([labels_a, labels_b]) if x not in index})
    if unknown:
        raise ValueError(f"labels not among the categories {list(categories)}: {unknown}")
    ia = np.fromiter((index[x] for x in labels_a), dtype=np.int64, count=labels_a.size)
    ib = np.fromiter((index[x] for x in labels_b), dtype=np.int64, count=labels_b.size)
    matrix = np.zeros((len(categories), len(categories)), dtype=np.int64)
    np.add.at(matrix, (ia, ib), 1)
    return matrix


def cohens_kappa(labels_a: Sequence, labels_b: Sequence, categories: Sequence | None = None) -> float:
    """Cohen's kappa ``(p_o - p_e) / (1 - p_e)`` of two label sequences over the same tasks.

    ``p_o`` is the observed agreement, ``p_e`` the agreement expected from the two marginal
    label frequencies.  NaN (with a RuntimeWarning) when ``p_e == 1`` (both raters used one and the
    same label throughout: agreement is certain by chance, kappa is undefined).
    """
    if len(labels_a) == 0:
        raise ValueError("cohens_kappa: no shared tasks")
    if categories is None:
        categories = sorted(set(labels_a) | set(labels_b), key=str)
    matrix = confusion_matrix(labels_a, labels_b, categories).astype(np.float64)
    total = matrix.sum()
    p_o = np.trace(matrix) / total
    p_e = float(matrix.sum(axis=1) @ matrix.sum(axis=0)) / total**2
    if p_e >= 1.0:
        warnings.warn("cohens_kappa: chance agreement is 1; kappa is undefined (NaN)", RuntimeWarning, stacklevel=2)
        return float("nan")
    return float((p_o - p_e) / (1.0 - p_e))


def profile_agreement(profiles_a: Sequence, profiles_b: Sequence) -> dict:
    """Six-way and binary (learnable / not) agreement of two profile labellings of shared tasks."""
    profiles_a = np.asarray(profiles_a, dtype=object)
    profiles_b = np.asarray(profiles_b, dtype=object)
    binary_a = np.where(core.is_learnable(profiles_a), "learnable", "non-learnable").astype(object)
    binary_b = np.where(core.is_learnable(profiles_b), "learnable", "non-learnable").astype(object)
    binary_categories = ("learnable", "non-learnable")
    return {
        "n_shared": int(profiles_a.size),
        "kappa_six_way": cohens_kappa(profiles_a, profiles_b, core.PROFILES),
        "kappa_binary": cohens_kappa(binary_a, binary_b, binary_categories),
        "confusion_six_way": confusion_matrix(profiles_a, profiles_b, core.PROFILES),
        "confusion_binary": confusion_matrix(binary_a, binary_b, binary_categories),
        "categories_six_way": list(core.PROFILES),
        "categories_binary": list(binary_categories),
    }


def _distribution_row(mask: np.ndarray, score, weight, floor, total_weight) -> dict:
    n = int(mask.sum())
    return {
        "n": n,
        "share_of_pool": n / mask.size,
        "weight_share": float(weight[mask].sum() / total_weight),
        "mean_score": float(score[mask].mean()) if n else float("nan"),
        "mean_weight": float(weight[mask].mean()) if n else float("nan"),
        "floor_fraction": float(floor[mask].mean()) if n else float("nan"),
    }


def score_distribution(profiles, score, weight, eps: float = core.DEFAULT_EPS) -> dict[str, dict]:
    """The paper's score-distribution table, one row per profile plus the two combined groups.

    Each row: ``n``, ``share_of_pool`` (n / pool size), ``weight_share`` (fraction of total
    sampling weight), ``mean_score`` (mean s), ``mean_weight`` (mean w) and ``floor_fraction``
    (fraction of rows whose weight is at the floor, ``core.at_floor``).  Keys: the six
    ``core.PROFILES`` then ``learnable`` and ``non-learnable``.  Empty groups get n = 0 and NaN
    means.
    """
    profiles = np.asarray(profiles, dtype=object)
    score = np.asarray(score, dtype=np.float64)
    weight = np.asarray(weight, dtype=np.float64)
    if not (profiles.shape == score.shape == weight.shape) or profiles.ndim != 1:
        raise ValueError("profiles, score and weight must be 1-D and of equal length")
    if profiles.size == 0:
        raise ValueError("score_distribution: empty pool")
    unknown = sorted(set(profiles.tolist()) - set(core.PROFILES))
    if unknown:
        raise ValueError(f"unknown profile labels {unknown}; expected {list(core.PROFILES)}")
    core.normalize(weight)  # refuses negative, non-finite or all-zero weights
    total = float(weight.sum())
    floor = core.at_floor(weight, eps)
    table = {name: _distribution_row(profiles == name, score, weight, floor, total) for name in core.PROFILES}
    learnable = core.is_learnable(profiles)
    table["learnable"] = _distribution_row(learnable, score, weight, floor, total)
    table["non-learnable"] = _distribution_row(~learnable, score, weight, floor, total)
    return table


def probe_epoch_stability(r_early, r_late_by_epoch) -> np.ndarray:
    """Spearman of ``s_k = (1 - r_early) * max(0, r_late_k - r_early)`` against the final ``s_T``.

    :param r_early: ``(n_tasks,)`` pre-training accuracy (``pre`` in the paper).
    :param r_late_by_epoch: ``(n_tasks, T)`` accuracy after each probe epoch k = 1..T.
    :return: ``(T,)`` rho per epoch (the last is 1 by construction; NaN where s_k is constant,
        e.g. all zero at an epoch with no gain).
    """
    r_early = np.asarray(r_early, dtype=np.float64)
    late = np.asarray(r_late_by_epoch, dtype=np.float64)
    if late.ndim != 2 or late.shape[0] != r_early.shape[0]:
        raise ValueError(f"r_late_by_epoch must have shape (n_tasks={r_early.shape[0]}, T), got {late.shape}")
    scores = core.learnability_score(r_early[:, None], late)
    final = scores[:, -1]
    rho = np.empty(late.shape[1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for k in range(late.shape[1]):
            rho[k] = spearman(scores[:, k], final)
    return rho


def estimate_agreement(probe: dict, oracle: dict) -> dict:
    """Probe vs oracle on shared tasks: Spearman of each numeric column present in both, and the
    profile kappas when both carry ``profile``.

    :param probe: column name -> 1-D array (e.g. ``r_early``, ``r_late``, ``score``, ``profile``),
        rows aligned with ``oracle``'s (join them first, e.g. with ``analysis.pool_columns.join_on_id``).
    """
    out: dict = {}
    for name in ("r_early", "r_late", "delta", "score", "weight"):
        if name in probe and name in oracle:
            out[f"spearman_{name}"] = spearman(probe[name], oracle[name])
    if "profile" in probe and "profile" in oracle:
        out.update(profile_agreement(probe["profile"], oracle["profile"]))
    return out
