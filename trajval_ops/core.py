"""The TrajVal numeric core: plain numpy functions shared by operators, samplers and tools.

Everything here is pure (no I/O, no Data-Juicer): arrays in, arrays out, so the math exists
once.  Inputs are validated by the callers (see :mod:`trajval_ops.input_checks`); the functions
here still refuse values that would make the formulas meaningless.

Paper, section 4.2:

    r_phi = mean of acc(x, theta_t) over the K checkpoints of window phi
    delta = r_late - r_early
    s     = (1 - r_early) * max(0, delta)
    w     = max(s ** alpha, eps)
    p     = w / sum(w)
    w_final = w * w_online
"""

from __future__ import annotations

import numpy as np

DEFAULT_ALPHA = 0.3
DEFAULT_EPS = 0.05

#: Endpoint-only trajectory profiles, in the order of the paper's Figure 1.
PROFILES = ("stable", "sluggish", "ineffective", "mastered", "unlearned", "forgetting")
#: The paper's binary grouping: profiles with a non-negative training response.
LEARNABLE_PROFILES = frozenset({"stable", "sluggish", "ineffective"})
#: Name of the rule that resolves rows matching several Figure-1 criteria (see endpoint_profiles).
PROFILE_RULE = "saturation_first"



def _as_float_array(values, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        bad = int(np.flatnonzero((~np.isfinite(arr.reshape(arr.shape[0], -1))).any(axis=1))[0])
        raise ValueError(f"{name}: non-finite value at position {bad}")
    return arr


def _check_unit_interval(arr: np.ndarray, name: str) -> None:
    outside = (arr < 0.0) | (arr > 1.0)
    if outside.any():
        flat = outside.reshape(arr.shape[0], -1).any(axis=1)
        pos = int(np.flatnonzero(flat)[0])
        raise ValueError(f"{name}: value outside [0, 1] at position {pos}")


def window_mean(per_checkpoint_acc) -> np.ndarray:
    """Average per-checkpoint accuracies over a window of K checkpoints.

    :param per_checkpoint_acc: array of shape (n_rows, K) (or (n_rows,) for K = 1), values in
        [0, 1].
    :return: array of shape (n_rows,), the window mean ``r_phi``.
    """
    acc = _as_float_array(per_checkpoint_acc, "per-checkpoint accuracy")
    if acc.ndim == 1:
        acc = acc[:, None]
    if acc.ndim != 2 or acc.shape[1] == 0:
        raise ValueError(f"per-checkpoint accuracy must have shape (n_rows, K>=1), got {acc.shape}")
    _check_unit_interval(acc, "per-checkpoint accuracy")
    return acc.mean(axis=1)


#: A difference of pass rates below this is float noise, not a gain: window means of k/n rates
#: with n not a power of 2 (10, 12, an adaptive pass's stopped counts) differ in the last bit where
#: the windows are equal (2.8e-17), which scored a positive s, passed ``hard_cut`` at 0 and counted
#: as a positive score. Any two distinct rates of denominators below 10^6 differ by far more.
DELTA_NOISE = 1e-12


def reward_delta(r_early, r_late) -> np.ndarray:
    """``delta = r_late - r_early``, exactly 0 where the two differ by float noise alone."""
    delta = np.asarray(r_late, dtype=np.float64) - np.asarray(r_early, dtype=np.float64)
    return np.where(np.abs(delta) < DELTA_NOISE, 0.0, delta)


def learnability_score(r_early, r_late) -> np.ndarray:
    """``s = (1 - r_early) * max(0, r_late - r_early)``; in [0, 1] for inputs in [0, 1]."""
    r_early, r_late = _as_float_array(r_early, "r_early"), _as_float_array(r_late, "r_late")
    _check_unit_interval(r_early, "r_early")
    _check_unit_interval(r_late, "r_late")
    return (1.0 - r_early) * np.maximum(0.0, reward_delta(r_early, r_late))


def check_alpha_eps(alpha: float, eps: float) -> None:
    """Refuse parameters that make the weight formula meaningless."""
    if not (np.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha must be a finite number > 0, got {alpha!r}")
    if not (np.isfinite(eps) and 0 < eps <= 1):
        raise ValueError(f"eps must be in (0, 1], got {eps!r}")


def sampling_weight(score, alpha: float = DEFAULT_ALPHA, eps: float = DEFAULT_EPS) -> np.ndarray:
    """``w = max(s ** alpha, eps)``: power compression then a probability floor.

    Scores are in [0, 1], so the weight lies in [eps, 1].
    """
    check_alpha_eps(alpha, eps)
    score = _as_float_array(score, "score")
    if (score < 0).any():
        raise ValueError(f"score must be >= 0, first negative at position {int(np.flatnonzero(score < 0)[0])}")
    return np.maximum(np.power(score, alpha), eps)


def at_floor(weight, eps: float = DEFAULT_EPS) -> np.ndarray:
    """Boolean mask of rows whose weight was set by the floor (``s ** alpha <= eps``)."""
    return np.asarray(weight, dtype=np.float64) <= eps


def normalize(weight) -> np.ndarray:
    """``p = w / sum(w)``.  Refuses negative, non-finite, empty or all-zero weights. Weights
    whose sum overflows (each finite, e.g. ``[1e308, 1e308, 1]``) are divided by their largest
    first; every other vector is divided by its sum as it is."""
    w = _as_float_array(weight, "weight")
    if w.ndim != 1:
        raise ValueError(f"weight must be one-dimensional, got shape {w.shape}")
    if w.size == 0:
        raise ValueError("cannot normalise an empty weight vector (empty pool)")
    if (w < 0).any():
        raise ValueError(f"weight must be >= 0, first negative at position {int(np.flatnonzero(w < 0)[0])}")
    with np.errstate(over="ignore"):
        total = w.sum()
    if not total > 0:
        raise ValueError("all weights are zero: no row can be sampled")
    if np.isinf(total):  # finite weights whose sum overflows: only ratios matter, so scale first
        w = w / w.max()
        total = w.sum()
    return w / total


def uniform_mixture(weight, uniform_share: float) -> np.ndarray:
    """Weights that sample by the mixture ``p = (1 - u) * w / sum(w) + u / N``: a share ``u`` of
    the draws uniform, the rest by the prior (a prior that keeps breadth). Returned as ``N * p``
    (mean 1), so they go wherever a weight column goes."""
    if isinstance(uniform_share, bool) or not 0 <= uniform_share <= 1:
        raise ValueError(f"uniform_share must be in [0, 1], got {uniform_share!r}")
    p = normalize(weight)
    return p.size * ((1.0 - uniform_share) * p + uniform_share / p.size)


def compose_online(weight, online_weight) -> np.ndarray:
    """``w_final = w_trajval * w_online``: the static prior times an online scheduler's weight."""
    w = _as_float_array(weight, "weight")
    w_online = _as_float_array(online_weight, "online weight")
    if w.shape != w_online.shape:
        raise ValueError(f"weight and online weight differ in shape: {w.shape} vs {w_online.shape}")
    if (w_online < 0).any():
        pos = int(np.flatnonzero(w_online < 0)[0])
        raise ValueError(f"online weight must be >= 0, first negative at position {pos}")
    return w * w_online


#: Decimals delta is rounded to before any profile band is applied (endpoint and dense alike).
PROFILE_DELTA_DECIMALS = 9


def profile_delta(r_early, r_late) -> np.ndarray:
    """The delta profile bands compare: ``r_late - r_early`` rounded to 9 decimals, so pass
    rates on a k/n grid that land on a band edge (1.0 - 0.85 = 0.15) fall on the documented
    side instead of on float noise. Every profile rule (endpoint and dense) uses it."""
    return np.round(reward_delta(r_early, r_late), PROFILE_DELTA_DECIMALS)


def profile_rate(rate) -> np.ndarray:
    """A pass rate as the profile levels (0.9, 0.1) and the within-bin edges (1/3, 2/3) compare it:
    rounded to 9 decimals, so a window's mean of k/n rates landing on a level (mean(0, 0, 0.3) =
    0.09999999999999999) falls on the documented side, as :func:`profile_delta` does for delta."""
    return np.round(np.asarray(rate, dtype=np.float64), PROFILE_DELTA_DECIMALS)


def endpoint_profiles(r_early, r_late) -> np.ndarray:
    """Endpoint-only approximation of the paper's six trajectory profiles (Figure 1).

    Figure 1 also uses the trajectory's sigma and R^2, which two endpoints cannot give; the
    approximation keeps the delta bands and the endpoint criteria only (pass rates compared as
    :func:`profile_rate` rounds them):

    - mastered:    r_early > 0.9 and delta < 0.1
    - unlearned:   r_late < 0.1 and delta < 0.1
    - forgetting:  delta < -0.05
    - stable:      delta > 0.4
    - sluggish:    0.15 < delta <= 0.4
    - ineffective: -0.05 <= delta <= 0.15

    Overlaps are resolved by the ``saturation_first`` rule: the criteria are tried in the order
    above and the first match wins, so a near-ceiling or near-floor task is labelled by its
    saturation before its (small) change.  The paper's Figure 1 leaves delta == -0.05 in no band;
    it is put in ``ineffective`` so that every row gets exactly one label. Delta is
    :func:`profile_delta` (rounded, as in the dense rule).

    :return: array of profile names (dtype object), one per row.
    """
    r_early = np.asarray(r_early, dtype=np.float64)
    r_late = np.asarray(r_late, dtype=np.float64)
    delta = profile_delta(r_early, r_late)
    conditions = [
        (profile_rate(r_early) > 0.9) & (delta < 0.1),
        (profile_rate(r_late) < 0.1) & (delta < 0.1),
        delta < -0.05,
        delta > 0.4,
        delta > 0.15,
    ]
    choices = ["mastered", "unlearned", "forgetting", "stable", "sluggish"]
    return np.select(conditions, choices, default="ineffective").astype(object)


def is_learnable(profiles) -> np.ndarray:
    """The paper's binary grouping: True for stable, sluggish and ineffective."""
    return np.isin(np.asarray(profiles, dtype=object), list(LEARNABLE_PROFILES))


def multinomial_indices(prob, num_samples: int, seed: int) -> np.ndarray:
    """Draw ``num_samples`` row indices with replacement in proportion to ``prob``.

    Returned in ascending row order (each index repeated by its draw count), so the output keeps
    the pool's order; the same seed gives the same indices.
    """
    p = normalize(prob)
    if num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}")
    counts = np.random.default_rng(seed).multinomial(num_samples, p)
    return np.repeat(np.arange(p.size), counts)


def systematic_counts(prob, num_samples: int, seed: int) -> np.ndarray:
    """Low-variance (systematic) resampling counts.

    One uniform offset ``u`` in [0, 1) and ``num_samples`` evenly spaced pointers over the
    cumulative expected counts ``C_i = num_samples * cumsum(p)_i``; row i gets
    ``floor(C_i + u) - floor(C_{i-1} + u)`` copies, which is always floor or ceil of
    ``num_samples * p_i``, and the counts sum to ``num_samples``.
    """
    p = normalize(prob)
    if num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}")
    cumulative = np.cumsum(p) * num_samples
    cumulative[-1] = num_samples  # remove float drift so the total is exact
    u = np.random.default_rng(seed).random()
    edges = np.floor(np.concatenate(([0.0], cumulative)) + u)
    return np.diff(edges).astype(np.int64)


def systematic_indices(prob, num_samples: int, seed: int) -> np.ndarray:
    """Row indices (ascending) from :func:`systematic_counts`."""
    counts = systematic_counts(prob, num_samples, seed)
    return np.repeat(np.arange(counts.size), counts)


def hard_cut_mask(score, threshold: float) -> np.ndarray:
    """Rows whose score exceeds a threshold: ``score > threshold``. Not the paper's learnable
    subset, which is defined by profile (:func:`is_learnable`): a threshold on s drops
    Ineffective tasks with delta <= 0 and keeps Mastered tasks with a small positive delta."""
    return np.asarray(score, dtype=np.float64) > threshold


# ----------------------------------------------------------------------------- one-pass priors
# Training-free priors from the early endpoint pass alone (no probe, no late pass): their
# formulas; the priors themselves (settings, passes, provenance) are :mod:`trajval_ops.priors`.

#: The largest Bernoulli variance (at r = 0.5): the variance prior's scale.
MAX_VARIANCE = 0.25


def variance_score(r_early) -> np.ndarray:
    """``r_early * (1 - r_early)``: the Bernoulli variance of a task's reward, largest at 0.5 —
    the prior of variance- or "moderate difficulty"-based curricula."""
    r = _as_float_array(r_early, "r_early")
    _check_unit_interval(r, "r_early")
    return r * (1.0 - r)


def bandpass_score(r_early, low: float = 0.0, high: float = 1.0) -> np.ndarray:
    """1 where ``low < r_early < high`` else 0: DAPO's dynamic-sampling filter (groups with
    all-correct or all-wrong rollouts carry no GRPO gradient) applied once as a prior."""
    r = _as_float_array(r_early, "r_early")
    _check_unit_interval(r, "r_early")
    check_band(low, high)
    return ((r > low) & (r < high)).astype(np.float64)


def check_band(low: float, high: float) -> None:
    """Refuse a band-pass interval outside ``0 <= low < high <= 1``."""
    if not (np.isfinite(low) and np.isfinite(high) and 0.0 <= low < high <= 1.0):
        raise ValueError(f"band must satisfy 0 <= low < high <= 1, got ({low}, {high})")


def _check_eps(eps: float) -> None:
    if not (np.isfinite(eps) and 0 < eps <= 1):
        raise ValueError(f"eps must be in (0, 1], got {eps!r}")


def variance_weight(score, eps: float = DEFAULT_EPS) -> np.ndarray:
    """The variance prior's score as a sampling weight on TrajVal's scale, ``[eps, 1]``:
    ``max(4 r (1 - r), eps)`` (1 at r = 0.5). The scale is fixed, not the pool's maximum, so a
    batch's weights do not depend on the other batches; a pool where every task sits at 0 or 1
    gets ``eps`` everywhere: uniform sampling."""
    _check_eps(eps)
    return np.maximum(_as_float_array(score, "score") / MAX_VARIANCE, eps)


def bandpass_weight(score, eps: float = DEFAULT_EPS) -> np.ndarray:
    """The band-pass prior's score as a sampling weight: ``max(1{low < r < high}, eps)``."""
    _check_eps(eps)
    return np.maximum(_as_float_array(score, "score"), eps)


# ----------------------------------------------------------------------------- noise-aware scores
# The paper's score reads the pass rates k/n as if they were exact; with n = 16 most positive
# scores lie within the rollout noise. The posterior estimators score each task by the expected
# s under a beta-binomial model of its k successes in n rollouts at each end, the beta prior
# fitted on the pool (empirical Bayes), or on the task's group (``pooled``): a noisy row is
# shrunk toward its pool's (group's) typical pass rate, a well-measured one barely moves.

#: The score estimators of the learnability mapper.
ESTIMATORS = ("paper", "posterior", "pooled")
#: Points per axis of the quantile grid the posterior expectations and intervals are taken on.
POSTERIOR_GRID = 64
#: Central mass of the interval given for each row's score.
INTERVAL_MASS = 0.95


#: Why one rollout per row cannot fit the estimators' prior.
UNIDENTIFIED_PRIOR = ("the noise-aware estimators fit their beta prior from how far the pass rates spread beyond the "
                      "binomial noise of n rollouts, which one rollout per row cannot show (its rates are 0 or 1 "
                      "whatever the prior): measure n >= 2 (the endpoint mapper's n) or use estimator: paper")


def fit_beta_prior(rates, n) -> tuple[float, float]:
    """A beta prior ``(a, b)`` for pass rates ``k / n`` measured with ``n`` rollouts each, by the
    method of moments of the beta-binomial: the observed variance of the rates is the prior's
    variance plus the binomial noise ``m (1 - m) mean(1 / n)``. Rows with ``n = 0`` are left out;
    a pool with no spread beyond the noise gets a strong prior at its mean (a + b = 1 / rho - 1 =
    999, the overdispersion rho clipped at 1e-3), one row or a pool all at 0 or 1 a weak
    Jeffreys-like prior at its (clipped) mean (a + b = 1).

    :raises ValueError: every measured row has one rollout: the spread of 0/1 rates is the
        binomial noise alone, whatever the prior (the fit took rho = 0.999 and shrank nothing).
    """
    rates, n = np.asarray(rates, dtype=np.float64), np.asarray(n, dtype=np.float64)
    measured = n > 0
    rates, n = rates[measured], n[measured]
    if rates.size == 0:
        return 0.5, 0.5
    mean = float(np.clip(rates.mean(), 1e-3, 1 - 1e-3))
    if rates.size < 2 or np.all((rates == 0) | (rates == 1)) and np.ptp(rates) == 0:
        return mean, 1.0 - mean
    noise = float(np.mean(1.0 / n))
    if noise >= 1:
        raise ValueError(f"{UNIDENTIFIED_PRIOR}: every measured row has n = 1")
    spread = float(rates.var()) / (mean * (1.0 - mean))
    rho = float(np.clip((spread - noise) / (1.0 - noise), 1e-3, 0.999))
    total = 1.0 / rho - 1.0
    return mean * total, (1.0 - mean) * total


def _posterior_grid(successes, trials, prior: tuple[float, float], grid: int) -> np.ndarray:
    """``(rows, grid)`` quantiles of each row's posterior Beta(a + k, b + n - k) at the grid's
    midpoints (the posterior as ``grid`` equally likely values)."""
    from scipy.special import betaincinv

    a, b = prior
    u = (np.arange(grid) + 0.5) / grid
    posterior_a = (a + np.asarray(successes, dtype=np.float64))[:, None]
    posterior_b = (b + np.asarray(trials, dtype=np.float64) - np.asarray(successes, dtype=np.float64))[:, None]
    return betaincinv(posterior_a, posterior_b, u[None, :])


def posterior_score(r_early, n_early, r_late, n_late, prior_early, prior_late,
                    grid: int = POSTERIOR_GRID) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Expected learnability score ``E[(1 - p_e) max(0, p_l - p_e)]`` under independent beta
    posteriors of each end's pass rate, and its central ``INTERVAL_MASS`` interval.

    :param r_early, r_late: observed pass rates (k / n); ``n_early``, ``n_late`` the rollouts.
    :param prior_early, prior_late: ``(a, b)`` per row (arrays of shape (rows, 2)) or one pair.
    :return: ``(mean, low, high)``, one value per row, each in [0, 1].
    """
    r_early, r_late = _as_float_array(r_early, "r_early"), _as_float_array(r_late, "r_late")
    _check_unit_interval(r_early, "r_early")
    _check_unit_interval(r_late, "r_late")
    n_early = np.broadcast_to(np.asarray(n_early, dtype=np.float64), r_early.shape)
    n_late = np.broadcast_to(np.asarray(n_late, dtype=np.float64), r_late.shape)
    prior_early = np.broadcast_to(np.asarray(prior_early, dtype=np.float64), (r_early.size, 2))
    prior_late = np.broadcast_to(np.asarray(prior_late, dtype=np.float64), (r_late.size, 2))
    mean, low, high = (np.empty(r_early.size) for _ in range(3))
    tail = (1.0 - INTERVAL_MASS) / 2
    for start in range(0, r_early.size, 512):  # bounded memory: 512 rows x grid^2 values at a time
        rows = slice(start, start + 512)
        x = _grid_rows(r_early[rows] * n_early[rows], n_early[rows], prior_early[rows], grid)
        y = _grid_rows(r_late[rows] * n_late[rows], n_late[rows], prior_late[rows], grid)
        s = (1.0 - x)[:, :, None] * np.maximum(0.0, y[:, None, :] - x[:, :, None])
        s = s.reshape(s.shape[0], -1)
        mean[rows] = s.mean(axis=1)
        low[rows], high[rows] = np.quantile(s, [tail, 1.0 - tail], axis=1)
    return mean, low, high


def _grid_rows(successes, trials, priors: np.ndarray, grid: int) -> np.ndarray:
    out = np.empty((successes.size, grid))
    for prior in {tuple(p) for p in priors.tolist()}:  # one betaincinv call per distinct prior
        rows = np.all(priors == prior, axis=1)
        out[rows] = _posterior_grid(successes[rows], trials[rows], prior, grid)
    return out


def group_beta_priors(rates, n, groups) -> tuple[np.ndarray, dict]:
    """Each row's beta prior fitted on its group (``pooled``); a group of fewer than two
    measured rows, or of rows measured with one rollout each, takes the pool's prior. Returns
    ``(priors (rows, 2), {group: (a, b)})``."""
    rates, n = np.asarray(rates, dtype=np.float64), np.asarray(n, dtype=np.float64)
    keys = np.asarray([repr(g) for g in groups], dtype=object)
    pool = fit_beta_prior(rates, n)
    priors, fitted = np.empty((rates.size, 2)), {}
    for key in sorted(set(keys.tolist())):
        rows = keys == key
        fittable = int((n[rows] > 0).sum()) >= 2 and bool((n[rows] > 1).any())
        fitted[key] = fit_beta_prior(rates[rows], n[rows]) if fittable else pool
        priors[rows] = fitted[key]
    return priors, fitted


def noise_aware_score(estimator: str, r_early, n_early, r_late, n_late, groups=None):
    """The posterior learnability score of every row, its interval, and the fitted priors.

    :param estimator: ``posterior`` (one beta prior per end, fitted on the whole pool) or
        ``pooled`` (fitted on each row's group; groups of fewer than two measured rows take the
        pool's prior).
    :param groups: each row's group (``pooled`` only).
    :return: ``(mean, low, high, fitted)``; ``fitted`` describes the priors for provenance.
    """
    if estimator not in ("posterior", "pooled"):
        raise ValueError(f"estimator must be 'posterior' or 'pooled', got {estimator!r}")
    n_early = np.broadcast_to(np.asarray(n_early, dtype=np.float64), np.shape(r_early))
    n_late = np.broadcast_to(np.asarray(n_late, dtype=np.float64), np.shape(r_late))
    if estimator == "posterior":
        early, late = fit_beta_prior(r_early, n_early), fit_beta_prior(r_late, n_late)
        fitted = {"early": [round(v, 6) for v in early], "late": [round(v, 6) for v in late]}
    else:
        if groups is None:
            raise ValueError("the pooled estimator needs each row's group")
        early, early_fit = group_beta_priors(r_early, n_early, groups)
        late, late_fit = group_beta_priors(r_late, n_late, groups)
        fitted = {"early": {k: [round(v, 6) for v in ab] for k, ab in early_fit.items()},
                  "late": {k: [round(v, 6) for v in ab] for k, ab in late_fit.items()}}
    mean, low, high = posterior_score(r_early, n_early, r_late, n_late, early, late)
    return mean, low, high, fitted
