"""Evaluation-curve metrics as defined in the paper's appendix ("Evaluation Metrics").

A curve is one benchmark's accuracy at each evaluation step (a 1-D array), or several seeds of
it (a 2-D ``(seeds, steps)`` array, averaged over seeds first, as the paper does).

- **Best Acc**: the maximum of the sliding-window mean (window 5) of the raw curve.
- **AUC**: the arithmetic mean of the accuracies over all evaluation steps; against completions
  (:func:`auc_at_budgets`, this project's addition for dynamic sampling): the mean accuracy at
  the baseline's evaluation completions, each curve read at the same spend.
- **Steps-to-Baseline (S2B)**: with ``T`` the baseline's Best Acc and ``s_base`` the first step
  at which the baseline's sliding-window mean attains ``T``, S2B is ``100 * s_comp / s_base``,
  where ``s_comp`` is the first step at which the method's sliding-window mean reaches ``T``.
- **Avg** (macro average): the per-benchmark curves are averaged at each step into one macro
  curve, and Best Acc, AUC and S2B are computed on that curve.

Conventions (the paper leaves them open): a window is credited to its *last* evaluation step
(the step at which its mean is first known); ``steps`` default to ``1..n`` (evaluation index),
pass the real training steps (e.g. ``0, 12, 24, ...``; an evaluation of the base model at step
0 is accepted) to get them in the output; a curve shorter than the window uses one window over
the whole curve; a method that never reaches ``T`` has ``s_comp = None`` and ``S2B = inf``; a
baseline that attains ``T`` at step 0 (window 1, best at the base model) leaves S2B undefined
(NaN); "reaches" means ``>= T - 1e-12`` (float round-off). Every S2B the paper reports is a
multiple of 100/99, i.e. ``s_base = 99`` in its units: with evaluations indexed 1..100 and
windows credited to their last step, the baselines attained their Best Acc at the 99th
evaluation (docs/diagnostics.md).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

DEFAULT_WINDOW = 5
_REACH_TOLERANCE = 1e-12


def seed_average(curve) -> np.ndarray:
    """A 1-D curve as is; a ``(seeds, steps)`` array averaged over seeds."""
    curve = np.asarray(curve, dtype=np.float64)
    if curve.ndim == 2:
        curve = curve.mean(axis=0)
    if curve.ndim != 1 or curve.size == 0:
        raise ValueError(f"a curve must be 1-D (steps) or 2-D (seeds, steps) and non-empty, got shape {curve.shape}")
    if not np.all(np.isfinite(curve)):
        raise ValueError(f"curve has a non-finite value at step index {int(np.flatnonzero(~np.isfinite(curve))[0])}")
    return curve


def _steps(steps, n: int) -> np.ndarray:
    if steps is None:
        return np.arange(1, n + 1, dtype=np.float64)
    steps = np.asarray(steps, dtype=np.float64)
    if steps.shape != (n,) or not np.all(np.diff(steps) > 0) or steps[0] < 0:
        raise ValueError(f"steps must be {n} strictly increasing non-negative values, got {steps.tolist()}")
    return steps


def sliding_window_mean(curve, window: int = DEFAULT_WINDOW) -> np.ndarray:
    """Means of every run of ``window`` consecutive values (length ``n - window + 1``)."""
    curve = seed_average(curve)
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    window = min(window, curve.size)
    cumulative = np.concatenate(([0.0], np.cumsum(curve)))
    return (cumulative[window:] - cumulative[:-window]) / window


def best_acc(curve, window: int = DEFAULT_WINDOW) -> float:
    """Peak of the sliding-window mean."""
    return float(sliding_window_mean(curve, window).max())


def auc(curve) -> float:
    """Mean accuracy over all evaluation steps."""
    return float(seed_average(curve).mean())


def auc_at_budgets(curve, completions, budgets) -> float:
    """AUC against completions: the mean accuracy at each of ``budgets`` (cumulative completions),
    the curve read at ``completions`` (its evaluations' cumulative completions, increasing) and
    interpolated linearly between them. With the baseline's own evaluation completions as
    ``budgets`` the baseline's value is its AUC; another arm is read at the same spend.

    :raises ValueError: a budget outside the curve's completions (not measured there).
    """
    curve = seed_average(curve)
    completions = np.asarray(completions, dtype=np.float64)
    budgets = np.asarray(budgets, dtype=np.float64)
    if completions.shape != curve.shape or np.any(np.diff(completions) <= 0):
        raise ValueError(f"completions must be {curve.size} increasing values, got {completions.tolist()}")
    if budgets.size == 0 or budgets.min() < completions[0] or budgets.max() > completions[-1]:
        raise ValueError(f"budgets {budgets.tolist()} outside the curve's completions "
                         f"[{completions[0]}, {completions[-1]}]")
    return float(np.interp(budgets, completions, curve).mean())


def first_step_reaching(curve, target: float, steps=None, window: int = DEFAULT_WINDOW) -> float | None:
    """First step whose window (credited to its last step) has mean >= ``target``; None if never."""
    curve = seed_average(curve)
    steps = _steps(steps, curve.size)
    smoothed = sliding_window_mean(curve, window)
    reached = np.flatnonzero(smoothed >= target - _REACH_TOLERANCE)
    if reached.size == 0:
        return None
    return float(steps[reached[0] + min(window, curve.size) - 1])


def steps_to_baseline(method_curve, baseline_curve, steps=None, window: int = DEFAULT_WINDOW) -> dict:
    """S2B of a method against its baseline (same evaluation steps).

    :return: ``target`` (baseline Best Acc), ``s_base``, ``s_comp`` (None if never reached) and
        ``s2b`` in percent (``inf`` if never reached).
    """
    baseline = seed_average(baseline_curve)
    method = seed_average(method_curve)
    if method.size != baseline.size:
        raise ValueError(f"method and baseline curves differ in length: {method.size} vs {baseline.size}")
    target = best_acc(baseline, window)
    s_base = first_step_reaching(baseline, target, steps, window)
    s_comp = first_step_reaching(method, target, steps, window)
    return {
        "target": target,
        "s_base": s_base,
        "s_comp": s_comp,
        "s2b": float("inf") if s_comp is None else (float("nan") if s_base == 0 else 100.0 * s_comp / s_base),
    }


def macro_average_curve(curves: Mapping[str, object]) -> np.ndarray:
    """Seed-average each benchmark's curve, then average the benchmarks at each step."""
    if not curves:
        raise ValueError("no benchmark curves")
    averaged = {name: seed_average(c) for name, c in curves.items()}
    lengths = {name: c.size for name, c in averaged.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"benchmark curves differ in length (evaluation steps): {lengths}")
    return np.mean(np.stack(list(averaged.values())), axis=0)


def curve_metrics(
    method: Mapping[str, object],
    baseline: Mapping[str, object] | None = None,
    steps=None,
    window: int = DEFAULT_WINDOW,
) -> dict[str, dict]:
    """Best Acc, AUC (and S2B against ``baseline``) per benchmark plus the macro ``avg``.

    :param method: benchmark name -> curve (1-D, or 2-D seeds x steps).
    :param baseline: the same benchmarks' baseline curves; S2B is computed when given.
    :return: ``{benchmark: {"best_acc", "auc"[, "s2b", "s_base", "s_comp", "target"]}, ...,
        "avg": {...}}``; ``avg`` is computed on the macro-averaged curves.
    """
    if "avg" in method:
        raise ValueError("'avg' is reserved for the macro average; rename that benchmark")
    if baseline is not None and set(baseline) != set(method):
        raise ValueError(f"method and baseline benchmarks differ: {sorted(method)} vs {sorted(baseline)}")
    named = {name: seed_average(c) for name, c in method.items()}
    named["avg"] = macro_average_curve(method)
    base = None
    if baseline is not None:
        base = {name: seed_average(c) for name, c in baseline.items()}
        base["avg"] = macro_average_curve(baseline)
    out = {}
    for name, curve in named.items():
        row = {"best_acc": best_acc(curve, window), "auc": auc(curve)}
        if base is not None:
            row.update(steps_to_baseline(curve, base[name], steps, window))
        out[name] = row
    return out
