"""Diagnostics of a TrajVal pool: plain numpy/scipy, no Data-Juicer.

- :mod:`.trajectories` — dense per-checkpoint trajectories: delta, sigma, linear-fit R^2, the
  six Figure-1 profiles, the slope-R^2 projection.
- :mod:`.agreement` — Spearman of two estimates, Cohen's kappa of profile labels, the per-profile
  score distribution (the paper's score-distribution table), probe-epoch stability.
- :mod:`.within_bin` — terciles of r_early split into high/low-delta halves with matched r_early.
- :mod:`.curves` — evaluation-curve metrics: Best Acc, AUC, Steps-to-Baseline, macro averages.
- :mod:`.pool_columns` — a pool's diagnostic columns and dense-trajectory matrices (errors name
  the row and the field), joins on id, atomic figures.
- :mod:`.pool_report` — the HTML + PNG report of a weighted pool (``trajval report``;
  matplotlib imported lazily).
"""
