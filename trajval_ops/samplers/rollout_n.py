"""Rollouts per prompt from a prior's pass rate (``__rollout_n__`` for verl 0.9's agent loop):
the numeric core, pure numpy, so it can be used and tested without verl
(:class:`trajval_ops.samplers.verl_dataset.TrajvalVerlDataset` is the glue; docs/howto/trainers.md
has the rule and its arithmetic)."""

from __future__ import annotations

import numpy as np


def group_variance_probability(rate, rollouts) -> np.ndarray:
    """P(a group of ``rollouts`` at pass rate ``rate`` is not all-equal) = 1 - r^m - (1 - r)^m."""
    rate, rollouts = np.asarray(rate, dtype=np.float64), np.asarray(rollouts, dtype=np.float64)
    return 1.0 - rate**rollouts - (1.0 - rate) ** rollouts


#: Iteration caps of the allocation: the bisection on the level halves a bracket of at most
#: max_n * ln 2 to below 1e-15 of it; Newton from the left of a root climbs to it in a few steps.
_BISECTIONS = 64
_NEWTON_STEPS = 60


def _rollouts_to_reach(log_a: np.ndarray, log_b: np.ndarray, s: float, min_n: int, max_n: int) -> np.ndarray:
    """Real m in [min_n, max_n] where the all-equal probability r^m + (1 - r)^m falls to e^-s
    (clipped to the bounds), for ``log_a = ln r``, ``log_b = ln(1 - r)``, 0 < r < 1.

    g(m) = ln(r^m + (1 - r)^m) is convex and decreasing with g(1) = 0, and lies between m*M and
    m*M + ln 2 (M the larger log): the root is at least s / |M|, and Newton from a point left of
    the root stays left of it and climbs to it.
    """
    def log_all_equal(m):
        return np.logaddexp(m * log_a, m * log_b)

    m = np.full(log_a.shape, float(min_n))
    inside = (log_all_equal(float(min_n)) > -s) & (log_all_equal(float(max_n)) < -s)
    m[log_all_equal(float(max_n)) >= -s] = float(max_n)
    if not inside.any():
        return m
    a, b = log_a[inside], log_b[inside]
    root = np.maximum(float(min_n), s / -np.maximum(a, b))
    for _ in range(_NEWTON_STEPS):
        g = np.logaddexp(root * a, root * b)
        share_a = np.exp(root * a - g)  # the slope is the mean of the logs weighted by the terms
        step = (g + s) / -(share_a * a + (1.0 - share_a) * b)
        root = root + step
        if np.all(step <= 1e-12 * root):
            break
    m[inside] = np.clip(root, min_n, max_n)
    return m


def rollout_n_per_prompt(rates, n: int, min_n: int, max_n: int) -> np.ndarray:
    """Rollouts for each prompt of a pass from its pass rate: integers in ``[min_n, max_n]``
    summing to ``n * len(rates)``. Pure and deterministic (no randomness, no verl).

    The rule is max-min over the chance of a learning signal: with P_i(m) = 1 - r_i^m - (1 - r_i)^m
    the probability that prompt i's group of m is not all-equal, find the largest level p such that
    giving every prompt m_i = clip(the m where P_i(m) = p, min_n, max_n) stays within the total,
    i.e. sum m_i = n * prompts. Prompts whose rate is near 0 or 1 need more rollouts to reach p,
    so they get more. A rate of exactly 0 or 1 makes every group all-equal (P = 0 for any m), so a
    rollout more cannot help it: such prompts get ``min_n``, and share what is left only when
    every other prompt is at ``max_n``. The real m_i are rounded by largest remainder (the
    remainders' order, ties by position), which keeps the sum exact and each m_i within one of its
    real value.

    :param rates: pass rate of each prompt served in the pass (a row served twice appears twice).
    :raises ValueError: a rate outside [0, 1] or NaN (named by position), or bounds that cannot hold
        the total.
    """
    rates = np.asarray(rates, dtype=np.float64)
    if rates.ndim != 1:
        raise ValueError(f"rates must be one-dimensional, got shape {rates.shape}")
    bad = ~((rates >= 0.0) & (rates <= 1.0))
    if bad.any():
        position = int(np.argmax(bad))
        raise ValueError(f"rates[{position}] = {rates[position]} is not a pass rate in [0, 1]")
    if not 1 <= min_n <= n <= max_n:
        raise ValueError(f"need 1 <= min_n <= n <= max_n, got min_n={min_n}, n={n}, max_n={max_n}")
    total = n * rates.size
    if rates.size == 0:
        return np.zeros(0, dtype=np.int64)

    degenerate = (rates == 0.0) | (rates == 1.0)
    n_degenerate = int(degenerate.sum())
    n_open = rates.size - n_degenerate
    real = np.full(rates.size, float(min_n))
    if max_n * n_open + min_n * n_degenerate <= total:
        # the prompts a rollout more can help are all at max_n: the rest goes to the others, evenly
        real[~degenerate] = float(max_n)
        if n_degenerate:
            real[degenerate] = (total - max_n * n_open) / n_degenerate
        return _largest_remainder(real, total, max_n)
    unique, inverse, counts = np.unique(rates[~degenerate], return_inverse=True, return_counts=True)
    log_a, log_b = np.log(unique), np.log1p(-unique)
    budget = total - min_n * n_degenerate

    def allotted(s: float) -> np.ndarray:
        return _rollouts_to_reach(log_a, log_b, s, min_n, max_n)

    def within(s: float) -> bool:
        return float(counts @ allotted(s)) <= budget

    # s = -ln(1 - p). At s = 0 one rollout reaches p = 0 (all at min_n, within the budget as
    # n >= min_n); at `high`, max_n stays short of p for every rate (all at max_n, over the budget).
    low, high = _bisect(within, 0.0, float(np.max(-np.logaddexp(max_n * log_a, max_n * log_b))))
    real[~degenerate] = allotted(low)[inverse]  # the side within the budget: rounding only adds
    if not _roundable(real, total, max_n):
        # A rate so near 0 (<= ~1e-19) that its rollouts rise from min_n to max_n within the
        # bracket's absolute width (~1e-18 of s): refine in ln s, where every m_i moves by at most
        # max_n per unit, from a positive level within the budget (every prompt at most n there).
        floor = max(low, float(np.min(-np.logaddexp(n * log_a, n * log_b))))
        if 0.0 < floor < high:
            low, _ = _bisect(lambda t: within(float(np.exp(t))), float(np.log(floor)), float(np.log(high)))
            real[~degenerate] = allotted(float(np.exp(low)))[inverse]
    return _largest_remainder(real, total, max_n)


def _bisect(within, low: float, high: float) -> tuple[float, float]:
    """The bracket ``[low, high]`` after :data:`_BISECTIONS` halvings, ``within(low)`` kept true
    and ``within(high)`` false."""
    for _ in range(_BISECTIONS):
        middle = 0.5 * (low + high)
        if within(middle):
            low = middle
        else:
            high = middle
    return low, high


def _roundable(real: np.ndarray, total: int, max_n: int) -> bool:
    """Whether :func:`_largest_remainder` can bring ``real`` to ``total`` (one unit at most for
    each prompt below ``max_n``)."""
    whole = np.floor(real)
    return 0 <= total - int(whole.sum()) <= int((whole < max_n).sum())


def _largest_remainder(real: np.ndarray, total: int, max_n: int) -> np.ndarray:
    """Integers within one of ``real`` (each at most ``max_n``) summing to ``total``: the floors,
    plus one for the largest remainders (ties by position)."""
    whole = np.floor(real).astype(np.int64)
    short = total - int(whole.sum())
    remainder = np.where(whole < max_n, real - whole, -1.0)
    order = np.argsort(-remainder, kind="stable")
    if not 0 <= short <= int((whole < max_n).sum()):
        raise RuntimeError(f"rounding {real.sum()} rollouts to {total} needs {short} units")  # a bug, not an input
    whole[order[:short]] += 1
    return whole


def variance_summary(rates: np.ndarray, rollouts: np.ndarray) -> tuple[float, float]:
    """Mean and least P(group has variance) over the prompts whose rate is inside (0, 1)."""
    chance = group_variance_probability(rates, rollouts)[(rates > 0.0) & (rates < 1.0)]
    return (float(chance.mean()), float(chance.min())) if chance.size else (0.0, 0.0)
